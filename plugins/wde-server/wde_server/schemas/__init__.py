"""Pydantic models of every request and response, one module per API family."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, StrictInt, StrictStr
from pydantic_core import PydanticCustomError

from wde_server.schemas.unions import one_of


class Strict(BaseModel):
    """A request body: unknown fields are refused (a misspelt option is an error, not ignored), and every
    field takes only its own JSON type (``true`` is not an integer, ``"5"`` neither an integer nor a bool)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Open(BaseModel):
    """A response body."""

    model_config = ConfigDict(extra="allow")


SURROGATE = "contains a lone surrogate ({where}); send valid UTF-8 text"


def lone_surrogate(text: str) -> str | None:
    """Where ``text`` holds a lone surrogate (JSON ``"\\ud800"``, which no UTF-8 text holds), or ``None``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"\\u{ord(text[exc.start]):04x} at character {exc.start}"
    return None


def valid_text(text: str) -> str:
    """``text``, refused when it holds a lone surrogate."""
    where = lone_surrogate(text)
    if where is not None:
        raise PydanticCustomError("lone_surrogate", SURROGATE, {"where": where})
    return text


Text = Annotated[StrictStr, AfterValidator(valid_text)]  # every string a request sends
TokenIds = list[StrictInt]
Texts = one_of((Text, "a string"), (list[Text], "a list of strings"))
TokenInputs = one_of((Text, "a string"), (list[Text], "a list of strings"), (TokenIds, "a list of token ids"),
                     (list[TokenIds], "a list of token-id lists"))
