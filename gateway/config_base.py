"""The base of every config model: unknown keys are errors, fields may be given by name or alias."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
