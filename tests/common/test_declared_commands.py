"""Commands declare their interface (common/management/declared.py): the rows become exactly the
argparse options they name, the bases' rows come first, and a command's docstring is its help."""

from __future__ import annotations

import argparse
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import CommandError

from annotation.management.campaign_command import CampaignRunCommand, RunServices
from annotation.quality.run import qc_run_inline, qc_run_start
from common.management.arguments import command_errors, error_message, found
from common.management.base import LepusCommand
from common.management.declared import UNSET, Arg, OneOf, flag


def test_a_row_passes_only_the_fields_it_sets() -> None:
    parser = argparse.ArgumentParser()
    Arg("--limit", type=int, default=None, help="At most N.").add_to(parser)
    flag("--wait").add_to(parser)
    Arg("path").add_to(parser)  # `required` would be refused for a positional
    limit, wait, path = parser._actions[1:]
    assert (limit.type, limit.default, limit.help, limit.required) == (
        int,
        None,
        "At most N.",
        False,
    )
    assert (wait.default, wait.const, wait.nargs) == (False, True, 0)  # store_true's own default
    assert (path.dest, path.required) == ("path", True)
    assert vars(parser.parse_args(["x", "--limit", "3"])) == {
        "limit": 3,
        "wait": False,
        "path": "x",
    }


def test_but_keeps_the_shape_and_changes_only_what_it_names() -> None:
    shared = Arg("--scale", nargs=2, type=float, metavar=("LOW", "HIGH"))
    worded = shared.but(help="The judgments' scale.")
    assert (worded.nargs, worded.type, worded.metavar, worded.help) == (
        2,
        float,
        ("LOW", "HIGH"),
        "The judgments' scale.",
    )
    assert shared.help is None and shared.default is UNSET
    assert Arg("--out", dest="folder").key == "folder"
    assert Arg("--clips-per-job").key == "clips_per_job"


def test_one_of_makes_a_mutually_exclusive_group() -> None:
    parser = argparse.ArgumentParser()
    OneOf((flag("--wait"), flag("--inline")), required=True).add_to(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--wait", "--inline"])
    with pytest.raises(SystemExit):
        parser.parse_args([])
    assert parser.parse_args(["--inline"]).inline is True


class _Runs(CampaignRunCommand):
    runs = RunServices(label="QC run", start=qc_run_start, inline=qc_run_inline)  # never called
    arguments = (flag("--extra", help="Only this command's."),)


def test_the_bases_rows_come_first_then_the_commands_own() -> None:
    parser = _Runs().create_parser("manage.py", "runs")
    django_own = {"help", "version", "verbosity", "settings", "pythonpath", "traceback"}
    django_own |= {"no_color", "force_color", "skip_checks"}
    declared = [action.dest for action in parser._actions if action.dest not in django_own]
    assert declared == ["as_json", "slug", "run_async", "extra"]


def test_a_commands_docstring_is_its_help_folded_to_one_line() -> None:
    class Command(LepusCommand):
        """First line of the help,
        second line."""

    class Base(LepusCommand):
        """A base class's docstring describes the base, not a command."""

    assert Command.help == "First line of the help, second line."
    assert Base.help == ""


def test_every_shipped_command_declares_rather_than_overriding_add_arguments() -> None:
    for name, app in get_commands().items():
        if app.split(".")[0] not in {
            "annotation",
            "common",
            "datasets_app",
            "export",
            "training_bridge",
        }:
            continue
        command = load_command_class(app, name)
        assert type(command).add_arguments is LepusCommand.add_arguments, name
        assert command.help, name


def test_a_domain_error_ends_the_command_with_its_message() -> None:
    from django.core.exceptions import ValidationError

    with pytest.raises(CommandError, match=r"^bad; worse$"), command_errors(ValidationError):
        raise ValidationError(["bad", "worse"])
    # An error the command did not name goes through unchanged.
    with pytest.raises(KeyError), command_errors(ValueError):
        raise KeyError("x")
    with pytest.raises(CommandError, match=r"^no release 7$"):
        found(None, "no release 7")
    assert found(3, "unused") == 3

    class Refused(Exception):
        def describe(self) -> str:
            return "file.jsonl, line 2: not JSON"

    assert error_message(Refused("ignored")) == "file.jsonl, line 2: not JSON"


@pytest.mark.django_db
def test_a_lookup_failure_reads_as_before_through_call_command() -> None:
    output: dict[str, Any] = {"stdout": StringIO(), "stderr": StringIO()}
    with pytest.raises(CommandError, match=r"^no campaign with slug 'nope'$"):
        call_command("agreement", "nope", **output)
    with pytest.raises(CommandError, match=r"^training run 999 does not exist$"):
        call_command("resume_training", run=999, **output)
