"""Commands declare their interface; `DeclaredCommand` builds it.

A command states its help once, as the class docstring (folded to one line, as argparse shows it),
and its arguments as a class-level tuple of rows: `Arg` (one `add_argument` call; `flag` for an
on/off option), `OneOf` (a mutually exclusive group) or `Subcommands`. `add_arguments` adds the
rows of every class on the way down the MRO, the base's first, so a base class (`LepusCommand`'s
--json, `CampaignCommand`'s SLUG) declares its own and a subclass only what it adds. A row several
commands share is a module-level constant, and `row.but(help=...)` keeps its shape with a
command's own words.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, fields, replace
from typing import Any, ClassVar, Protocol

from django.core.management.base import BaseCommand, CommandParser


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # "not given": argparse's own default applies (False for store_true)


class ArgumentContainer(Protocol):
    def add_argument(self, *name_or_flags: str, **kwargs: Any) -> Any: ...


@dataclass(frozen=True)
class Arg:
    """One `parser.add_argument(name, ...)`; a field left at its default is not passed."""

    name: str
    _: KW_ONLY
    help: str | None = None
    action: str | None = None
    type: Callable[[str], Any] | None = None
    default: Any = UNSET
    choices: Sequence[Any] | None = None
    nargs: int | str | None = None
    metavar: str | tuple[str, ...] | None = None
    dest: str | None = None
    required: bool = False

    @property
    def key(self) -> str:
        """The key of the parsed value in the command's `options`."""
        return self.dest or self.name.lstrip("-").replace("-", "_")

    def but(self, **changes: Any) -> Arg:
        """The same row with some fields changed (most often a command's own help)."""
        return replace(self, **changes)

    def add_to(self, parser: ArgumentContainer) -> None:
        options = {
            field.name: getattr(self, field.name)
            for field in fields(self)
            if field.name != "name" and getattr(self, field.name) != field.default
        }
        parser.add_argument(self.name, **options)


def flag(name: str, help: str | None = None, *, dest: str | None = None) -> Arg:
    """An on/off option (`action="store_true"`), the most common row."""
    return Arg(name, action="store_true", help=help, dest=dest)


@dataclass(frozen=True)
class OneOf:
    """A mutually exclusive group of rows."""

    rows: tuple[Arg, ...]
    required: bool = False

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_mutually_exclusive_group(required=self.required)
        for row in self.rows:
            row.add_to(group)


@dataclass(frozen=True)
class Subcommands:
    """Sub-commands (`webhooks list|add|...`), each with its own rows; the chosen name goes to
    `dest`."""

    dest: str
    commands: Mapping[str, tuple[Arg, ...]]
    required: bool = True

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        subparsers = parser.add_subparsers(dest=self.dest, required=self.required)
        for name, rows in self.commands.items():
            subparser = subparsers.add_parser(name)
            for row in rows:
                row.add_to(subparser)


Row = Arg | OneOf | Subcommands


class DeclaredCommand(BaseCommand):
    arguments: ClassVar[tuple[Row, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Only a command (Django loads the class named `Command`) takes its docstring as help;
        # the docstring of a base such as `ImportCommand` describes the base.
        super().__init_subclass__(**kwargs)
        if cls.__name__ == "Command" and "help" not in vars(cls) and cls.__doc__:
            cls.help = " ".join(cls.__doc__.split())

    def add_arguments(self, parser: CommandParser) -> None:
        for klass in reversed(type(self).__mro__):
            for row in vars(klass).get("arguments", ()):
                row.add_to(parser)
