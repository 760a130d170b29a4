"""Pydantic models of every request and response, one module per API family."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A request body: unknown fields are refused (a misspelt option is an error, not ignored)."""

    model_config = ConfigDict(extra="forbid")


class Open(BaseModel):
    """A response body."""

    model_config = ConfigDict(extra="allow")
