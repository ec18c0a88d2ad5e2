"""The JSON Schema of the config file (``switchboard schema``, ``make schema``).

Draft 2020-12, made from the pydantic model, so it can never disagree with what ``run`` accepts;
every key carries a description (a field without its own is described by its model's docstring),
which is what editors show on hover. ``deploy/switchboard.schema.json`` is the committed copy the
example configs name in their first line; tests/gateway/test_config_schema.py fails when it is stale.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.config import BACKEND_NAME, Config

SCHEMA_ID = "urn:switchboard-gateway:config"


def config_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the config file, every key described (``switchboard schema``)."""
    schema = Config.model_json_schema(mode="validation")
    defs = schema.get("$defs", {})
    for node in [schema, *defs.values()]:
        for prop in node.get("properties", {}).values():
            if "description" in prop:
                continue
            # A field without its own description is described by its model's docstring.
            target = defs.get(str(prop.get("$ref", "")).rpartition("/")[2], {})
            if target.get("description"):
                prop["description"] = target["description"]
    # Validated as dict keys by the model; editors learn the rule from propertyNames.
    schema["properties"]["backends"]["propertyNames"] = {"pattern": BACKEND_NAME.pattern}
    schema.pop("title", None)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "Switchboard configuration",
        "description": "The YAML config of the Switchboard gateway (switchboard run -c FILE). ${NAME} and "
        "${NAME:-default} in strings are expanded from the environment when the file is loaded.",
        **schema,
    }


def schema_text() -> str:
    return json.dumps(config_schema(), indent=2, ensure_ascii=False) + "\n"
