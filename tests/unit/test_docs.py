"""Docs that stay true: the options reference and the command line's flags against the code,
and the README's links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from commit_protocol.metrics import METRICS
from commit_protocol.tables import table_option_names
from datasource.commands.cli import build_parser
from datasource.options.names import (
    CHECKPOINT_LOCATION,
    METRICS_MAILBOX,
    READ_OPTIONS,
    SINK_OPTIONS,
    WRITER_PARTITION_COLUMNS,
)

ROOT = Path(__file__).resolve().parents[2]
OPTIONS_PAGE = ROOT / "docs" / "options.md"
COMMANDS_PAGE = ROOT / "docs" / "operations.md"


def documented_options(text: str) -> set[str]:
    """Option names in the first cell of each row of the page's tables (``fs.<name>``, a
    family, is left out)."""
    names = set()
    for row in re.findall(r"^\| (.+?) \|", text, re.M):
        names |= {n for n in re.findall(r"`([^`]+)`", row) if "<" not in n}
    return names


def code_options() -> set[str]:
    # Spark's own: the checkpoint, and the writer's .partitionBy(...) (documented as that);
    # the metrics' mailbox, which rotsink's start sets (documented in the page's text)
    return ((set(SINK_OPTIONS) | set(READ_OPTIONS) | table_option_names())
            - {CHECKPOINT_LOCATION, WRITER_PARTITION_COLUMNS, METRICS_MAILBOX})


def test_every_option_is_in_the_reference_and_every_reference_row_is_an_option():
    documented = documented_options(OPTIONS_PAGE.read_text())
    assert sorted(code_options() - documented) == [], "options missing from docs/options.md"
    assert sorted(documented - code_options() - {"option"}) == [], \
        "docs/options.md documents options the code does not take"


def test_the_reference_check_fails_when_an_option_is_removed_from_the_page():
    text = OPTIONS_PAGE.read_text()
    without = re.sub(r"^\| `commit\.fsync` .*\n", "", text, flags=re.M)
    assert without != text
    assert "commit.fsync" in code_options() - documented_options(without)


def documented_flags() -> list[tuple[str, str]]:
    """``(command, flag)`` for each flag of each ``rotsink <command> ...`` line of the page."""
    found = []
    for command, rest in re.findall(r"^\s*rotsink (\w+)(.*)$", COMMANDS_PAGE.read_text(), re.M):
        found += [(command, flag) for flag in re.findall(r"--[\w-]+", rest.split("#")[0])]
    return found


@pytest.mark.parametrize("command, flag", documented_flags())
def test_every_documented_flag_exists(command, flag, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    assert re.search(rf"(^|\s){re.escape(flag)}\b", capsys.readouterr().out), \
        f"docs/operations.md documents rotsink {command} {flag}, which does not exist"


def test_the_commands_page_lists_flags():
    assert {c for c, _ in documented_flags()} >= {"demo", "inspect", "verify", "cat"}


def test_the_readme_links_to_pages_that_exist():
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert targets and all((ROOT / t).exists() for t in targets if "://" not in t), \
        [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert len(readme.splitlines()) < 300


def test_the_iceberg_reader_snippet_sets_what_the_tests_set():
    """docs/tables.md's "Spark's Iceberg reader in the application that writes" is the
    session the compat tests read Iceberg tables with (``tests/support/table_spark.py``):
    the same settings of the catalog, the same fixed values."""
    from tests.support.table_spark import iceberg_catalog_conf

    page = (ROOT / "docs" / "tables.md").read_text()
    snippet = page.split("**Spark's Iceberg reader in the application that writes**", 1)[1]
    settings = dict(re.findall(r'\.config\("(spark\.sql\.catalog\.lake[^"]*)", f?"([^"]*)"\)',
                               snippet.split("```", 2)[1]))
    tested = iceberg_catalog_conf("lake", Path("/data/catalog.db"))
    assert sorted(settings) == sorted(tested)
    fixed = ("", ".type", ".jdbc.schema-version", ".cache-enabled")
    assert {k: settings[f"spark.sql.catalog.lake{k}"] for k in fixed} == \
        {k: tested[f"spark.sql.catalog.lake{k}"] for k in fixed}


def test_every_metric_is_explained_in_watching_a_query():
    page = (ROOT / "docs" / "operations.md").read_text()
    section = page.split("\n## Watching a query\n")[1].split("\n## ")[0]
    assert set(re.findall(r"^\| `([^`]+)` \|", section, re.M)) == set(METRICS)


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_docs_packages_are_coordinates_spark_takes_of_jars_the_tests_read_with():
    """``spark.jars.packages`` takes ``group:artifact:version`` only: a classifier there
    (``gcs-connector:3.1.3:shaded``, as docs/object-storage.md once said) stops Spark at
    launch. Every jar a page adds is one that ``tests/jvm``'s poms fetch for the tests of
    Spark's readers: by coordinates, the same artifact; by URL in ``spark.jars``, the same
    jar."""
    poms = " ".join(p.read_text() for p in (ROOT / "tests" / "jvm").glob("*/pom.xml"))
    tested = set(re.findall(r"<artifactId>([^<$]+)</artifactId>\s*<version>([^<$]+)</version>"
                            r"(?:\s*<classifier>([^<]+)</classifier>)?", poms))
    from tests.support.jvm import TABLE_READERS

    # by name: the poms take Hadoop's and Spark's versions from the PySpark installed
    artifacts = set(re.findall(r"<artifactId>([^<]+)</artifactId>", poms))
    artifacts |= {a for readers in TABLE_READERS.values() for _, a, _ in readers.values()}
    found = 0
    for page in doc_pages():
        text = page.read_text()
        for literals in re.findall(r'"spark\.jars\.packages",\s*((?:"[^"]*"\s*)+)', text):
            for coordinate in "".join(re.findall(r'"([^"]*)"', literals)).split(","):
                parts = coordinate.strip().split(":")
                assert len(parts) == 3, f"{page.name}: {coordinate!r} is no group:artifact:version"
                assert parts[1] in artifacts, (page.name, coordinate)
                found += 1
        for url in re.findall(r'"spark\.jars",\s*"([^"]+)"\s*"([^"]+)"', text):
            jar = "".join(url).rsplit("/", 1)[1]
            assert jar in {f"{a}-{v}" + (f"-{c}" if c else "") + ".jar" for a, v, c in tested}, \
                (page.name, jar)
            found += 1
    assert found >= 2  # the Cloud Storage and Azure readers at least


def test_the_path_rows_name_every_store_rotsink_writes_to():
    """The ``path`` option's row in the README and in docs/options.md name the same URL
    schemes, and each scheme of a store rotsink has a client for
    (``commit_protocol.storage.objects.CLIENTS``): docs/options.md once listed only local,
    ``s3://`` and ``memory://``."""
    from commit_protocol.storage.objects import CLIENTS

    def schemes(page: Path) -> set[str]:
        (row,) = re.findall(r"^\| `path` \|.*$", page.read_text(), re.M)
        return set(re.findall(r"([a-z0-9]+)://", row)) - {"file"}

    readme, options = schemes(ROOT / "README.md"), schemes(OPTIONS_PAGE)
    assert readme == options
    assert set(CLIENTS) - {"gcs"} <= options  # gcs:// is gs:// by another name


def test_the_emulator_settings_are_those_the_tests_reach_the_emulators_with():
    """docs/object-storage.md's "Emulators and private endpoints" names every Hadoop setting
    the tests give Spark's readers of their emulators (``tests/support``), and the options
    rotsink's own clients get there."""
    import inspect

    from tests.support import azurite, cloud_readers, gcsserver, s3server

    page = (ROOT / "docs" / "object-storage.md").read_text()
    table = page.split("**Emulators and private endpoints.**", 1)[1].split("\n\n", 2)[1]
    named = set(re.findall(r"`([a-z0-9_.]+)=", table)) | set(re.findall(r"`([a-z0-9_.]+)`", table))
    s3a = re.findall(r'"([a-z.]+)": ', inspect.getsource(s3server.point_s3a_at))
    tested = {f"fs.s3a.{key}" for key in s3a if "key" not in key and "credentials" not in key}
    tested |= {k for k in re.findall(r'"(fs\.[a-z.]+)"', inspect.getsource(cloud_readers))
               if k not in cloud_readers.GCS_CONNECTOR}  # the Hadoop 3.5 sizes: a page above
    tested |= {f"fs.{key}" for key in {**gcsserver.OPTIONS, "endpoint_url": ""}}
    tested |= {f"fs.{key}" for key in azurite.options("http://127.0.0.1:10000")}
    assert tested <= named, tested - named
