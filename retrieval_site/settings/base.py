"""What every section of the environment shares: its parsing rules, the field types, ``VAR_DIR``.

Each field names its variable, its type (parsed by pydantic-settings: an unparsable or out-of-range
value stops startup with an error naming the variable) and its one default; empty counts as unset.
Fields marked ``Ranks`` change rankings: the search cache key includes them (``RANKING_SETTINGS``).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, ClassVar
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

BASE_DIR = Path(__file__).resolve().parent.parent.parent


class Ranks:
    """Marks a variable that changes rankings: a search cached under another value is not reused."""


def _comma_list(value: object) -> object:
    return [item.strip() for item in value.split(",") if item.strip()] if isinstance(value, str) else value


def _url(*schemes: str) -> AfterValidator:
    """Accepts unset ("") or a URL with one of ``schemes``."""

    def check(value: str) -> str:
        parts = urlsplit(value)
        if value and (parts.scheme not in schemes or not (parts.netloc or parts.path)):
            raise ValueError(f"expected a {' or '.join(f'{scheme}://' for scheme in schemes)} URL")
        return value

    return AfterValidator(check)


def _networks(values: list[str]) -> list[str]:
    for value in values:
        ipaddress.ip_network(value, strict=False)  # a typo fails at startup, not at the first use
    return values


# "a,b" in the environment (pydantic-settings would otherwise expect JSON for a list).
CommaList = Annotated[list[str], NoDecode, BeforeValidator(_comma_list)]
Networks = Annotated[CommaList, AfterValidator(_networks)]
HttpUrlOrUnset = Annotated[str, _url("http", "https")]
RedisUrlOrUnset = Annotated[str, _url("redis", "rediss", "unix")]
Lowercase = BeforeValidator(lambda value: value.strip().lower())
Uppercase = BeforeValidator(lambda value: value.strip().upper())


def _variable(name: str, field: FieldInfo) -> str:
    """The environment variable of a field: its alias (a plain name here) or its own name."""
    return field.validation_alias if isinstance(field.validation_alias, str) else name


class Section(BaseSettings):
    """One concern's variables. The sections are read together, once, as ``environment.Environment``,
    so a default may be made from a variable of a section read before (``data["VAR_DIR"]``)."""

    model_config = SettingsConfigDict(case_sensitive=True, env_ignore_empty=True, frozen=True)
    title: ClassVar[str] = "Local state"  # the heading of the section in docs/configuration.md

    VAR_DIR: Path = BASE_DIR / "var"  # local state: embedded servers, indexes, static files, secret key

    @classmethod
    def variables(cls) -> list[str]:
        """The names of the environment variables read, in order."""
        return [_variable(name, field) for name, field in cls.model_fields.items()]

    @classmethod
    def own_variables(cls) -> list[str]:
        """The variables this section adds to the sections it is made from."""
        inherited = {name for base in cls.__bases__ if issubclass(base, Section) for name in base.model_fields}
        return [_variable(name, field) for name, field in cls.model_fields.items() if name not in inherited]

    @classmethod
    def ranking(cls) -> tuple[str, ...]:
        """The settings marked ``Ranks``."""
        return tuple(name for name, field in cls.model_fields.items() if Ranks in field.metadata)
