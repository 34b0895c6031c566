"""Every example of the docs, run as written: each fenced block of README.md and docs/**/*.md
(and of the files they include with ``--8<-- "file"``, such as bench/README.md).

A block's kind is the ``<!-- example: KIND -->`` comment on the line directly above its
opening fence (the docs contract of issue 25), else a default by language: ```yaml whose
first line is ``# spoolrender.yaml`` is a config, other ```yaml a job, ```json json,
```text and a fence without language output. Any other block without a marker fails as an
"unmarked example", and so does a marker that is not directly above a fence. Each block is
one case, with an id such as ``docs/configuration.md:42-yaml`` (page, line of the fence,
language). How each kind is checked:

- ``job``: submitted with the function ``spoolrender submit`` calls (submission.submit: the
  job-file parser, the id check, the props check) into a temp spool whose spoolrender.yaml
  is the page's most recent ``config`` block above it, else the file ``spoolrender init``
  writes. A ``config-fragment`` never configures a job.
- ``config`` / ``config-fragment``: the text written as it is to a temp spool's
  spoolrender.yaml and loaded by spoolrender.config.spool_config.load_config (no environment). Files a
  config names (``secret_file: /etc/spoolrender/hook-secret``, projects) are not created:
  the loader reads none of them (a hook's secret is read when it is delivered); should it
  ever need one, the block fails and says which.
- ``json``: json.loads. ``output``: nothing to run. ``not-run: REASON``: the reason is
  required, nothing else is done.
- ``shell``, ``python``: the page's shell and python blocks run in one terminal
  (tests/support/docs_terminal.py), in page order, as a reader types them: one temp HOME,
  one temp working directory (not a checkout: a block that needs one, such as
  ``bash scripts/quickstart.sh``, is not-run), ``/srv/spool`` replaced by a temp directory
  (the only text rewritten), ``~/my-video`` a copy of the repository's remotion/ (without
  node_modules, its node_modules linked). Shell blocks run with ``bash -euo pipefail``,
  python blocks with this venv's python, each with a timeout (SHELL_TIMEOUT_S) in its own
  process group.
  On PATH first: this venv's ``spoolrender`` command (only it, not the venv's python and
  pip). A block that starts a runner with ``&`` leaves it running for the page's later
  blocks; it is stopped (SIGTERM, SIGTERM, SIGKILL) when the module's cases are done. A
  foreground ``spoolrender run`` or ``serve`` never ends: it fails on the timeout, so the
  docs write ``run --drain``, put it in the background, or mark the block not-run. A case
  run alone (``-k``) runs the page's earlier blocks first; one failing fails the later ones.
- ``shell-remotion``: the same, in a terminal of its own (a page's shell-remotion blocks
  only), with a longer timeout (REMOTION_TIMEOUT_S), marked ``remotion`` and ``slow`` and
  skipped as the other Remotion tests are.
- What the blocks of a terminal install themselves, they get as a user does. When one
  installs spoolrender (``pip install``, ``pipx install``), the terminal has no spoolrender
  on PATH but what the blocks install (~/.local/bin, then the system PATH), and its
  working directory holds the wheel ``python -m build --wheel`` makes of this checkout
  (``spoolrender-<version>-py3-none-any.whl``, as a user handed the wheel has it; built
  once per session). When one runs ``npm ci`` or ``npm install``, ~/my-video gets no linked
  node_modules and no package-lock.json, as a Remotion starter comes (issue 22: none ships
  a lockfile, so `npm ci` fails on every one): the install is real, `npm install` from the
  registry by way of the user's warm npm download cache. ``apt-get``
  runs as written (as root, installing what is installed changes nothing), waiting for
  the dpkg lock (APT_CONFIG) rather than failing while another apt-get runs.

Today's two broken examples (issue 25) fail here; the tests at the end run the harness on
their text in README.md at 8329ac5. Unmarked, the ```sh block is an "unmarked example" and
the hooks block a job ("field 'hooks': unknown field"). Marked as what they are, the hooks
block (``on: [failed]`` is the boolean key True to PyYAML) as a config-fragment::

    README.md:976: hooks.chat: unknown key(s) True (known: on, command, url, secret_file, ...)

and "Use your own Remotion project" (``pipx install ./spoolrender``) as shell-remotion::

    README.md:21: exit status 127; output:
    docs-example: line 1: pipx: command not found
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from support.checkout import REMOTION, REMOTION_MARKS, REPO
from support.dist import build_dist
from support.docs_examples import (
    RUN_KINDS,
    Example,
    Kind,
    collect,
    collect_pages,
    config_problem,
    job_problem,
    json_problem,
)
from support.docs_terminal import Terminal

SHELL_TIMEOUT_S = 120.0
REMOTION_TIMEOUT_S = 1800.0  # an install, a bundle and a render on a loaded host (900 s ran out at load 90)
_INSTALLS_SPOOLRENDER = re.compile(r"\bpipx? install\b")
_INSTALLS_NPM_PACKAGES = re.compile(r"\bnpm (ci|install|i)\b")

EXAMPLES = collect_pages(REPO)


def _chain_key(example: Example) -> tuple[str, bool]:
    return example.page, example.kind is Kind.SHELL_REMOTION


def _chains(examples: list[Example]) -> dict[tuple[str, bool], list[Example]]:
    """A page's runnable examples by terminal: its shell and python ones, its shell-remotion ones."""
    chains: dict[tuple[str, bool], list[Example]] = {}
    for example in examples:
        if example.kind in RUN_KINDS:
            chains.setdefault(_chain_key(example), []).append(example)
    return chains


CHAINS = _chains(EXAMPLES)


REMOTION_EXAMPLE_MARKS = [*REMOTION_MARKS, pytest.mark.slow]


def _param(example: Example) -> object:
    marks = REMOTION_EXAMPLE_MARKS if example.kind is Kind.SHELL_REMOTION else []
    if example.kind in RUN_KINDS:
        # A page's terminal runs its blocks in order: under pytest-xdist, all on one worker
        # (else each worker runs the page's earlier blocks again, in a terminal of its own).
        page, remotion = _chain_key(example)
        marks = [*marks, pytest.mark.xdist_group(f"docs:{page}:{'remotion' if remotion else 'shell'}")]
    return pytest.param(example, id=example.id, marks=marks)


def _remotion_example(test: Callable[..., None]) -> Callable[..., None]:
    for mark in REMOTION_EXAMPLE_MARKS:
        test = mark(test)
    return test


@pytest.fixture(scope="session")
def spoolrender_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, as `python -m build --wheel` makes it (once per session)."""
    dist = tmp_path_factory.mktemp("wheel") / "dist"
    build_dist(dist, "--wheel")  # from a copy: tests/remotion/test_projects.py may build at the same time
    (wheel,) = dist.glob("spoolrender-*.whl")
    return wheel


RunExample = Callable[[Example], str | None]


@pytest.fixture(scope="module")
def run_example(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunExample]:
    """Run a shell or python example in its page's terminal (made when first needed, all
    closed when the module is done); its problem, or None."""
    terminals: dict[tuple[str, bool], Terminal] = {}

    def run(example: Example) -> str | None:
        key = _chain_key(example)
        if key not in terminals:
            terminals[key] = _make_terminal(request, tmp_path_factory.mktemp("terminal"), key[1], CHAINS[key])
        return terminals[key].run_through(CHAINS[key], example)

    yield run
    for terminal in terminals.values():
        terminal.close()


def _make_terminal(request: pytest.FixtureRequest, root: Path, remotion: bool, chain: list[Example]) -> Terminal:
    """The terminal of ``chain``: what is on PATH, in dist/ and in ~/my-video/node_modules
    depends on what its blocks install themselves."""
    installs = any(_INSTALLS_SPOOLRENDER.search(e.text) for e in chain)
    npm = any(_INSTALLS_NPM_PACKAGES.search(e.text) for e in chain)
    return Terminal(root, project=REMOTION, link_node_modules=not npm, lockfile=not npm,
                    spoolrender=None if installs else Path(sys.executable).parent / "spoolrender",
                    wheel=request.getfixturevalue("spoolrender_wheel") if installs else None,
                    timeout=REMOTION_TIMEOUT_S if remotion else SHELL_TIMEOUT_S)  # fmt: skip


def example_problem(example: Example, run_example: RunExample) -> str | None:
    """Why ``example`` does not work as written (None: it does)."""
    if example.problem is not None:
        return f"{example.location}: {example.problem}"
    match example.kind:
        case Kind.JOB:
            return job_problem(example)
        case Kind.CONFIG | Kind.CONFIG_FRAGMENT:
            return config_problem(example)
        case Kind.JSON:
            return json_problem(example)
        case Kind.SHELL | Kind.SHELL_REMOTION | Kind.PYTHON:
            return run_example(example)
        case _:
            return None  # output: shown text; not-run: collected only with its reason


@pytest.mark.parametrize("example", [_param(e) for e in EXAMPLES])
def test_example(example: Example, run_example: RunExample) -> None:
    problem = example_problem(example, run_example)
    if problem is not None:
        pytest.fail(problem, pytrace=False)


# --- the collector and the harness on small pages ------------------------------------------

SMALL_PAGE = """\
# A page

<!-- example: shell -->
```sh
spoolrender init /srv/spool
```

```yaml
# spoolrender.yaml
commands:
  copy: [cp, "{props_file}", "{output}"]
```

````markdown
```sh
echo "inside a longer fence: text of the block around it"
```
````

~~~
```yaml
inside a tilde fence
```
~~~

1. In a list item:

    <!-- example: job -->
    ```yaml
    renderer: command
    command: copy
    ```

```json
{"a": [1, 2]}
```

```console
$ rm -rf ~
```

<!-- example: not-run -->
```ini
[Unit]
```

<!-- example: output -->

```text
the marker above is not directly above this fence
```

<!-- example: nonsense -->
```yaml
x: 1
```

<!-- example: not-run: a crontab line -->
```cron
0 * * * * true
```
"""


def test_the_collector_reads_markers_defaults_and_nested_fences() -> None:
    examples = collect("page.md", SMALL_PAGE)
    found = [(e.id, e.kind, e.problem is not None) for e in examples]
    assert found == [
        ("page.md:4-sh", Kind.SHELL, False),
        ("page.md:8-yaml", Kind.CONFIG, False),  # its first line: # spoolrender.yaml
        ("page.md:14-markdown", None, True),  # one block, the ```sh inside is its text
        ("page.md:20-plain", Kind.OUTPUT, False),
        ("page.md:29-yaml", Kind.JOB, False),
        ("page.md:34-json", Kind.JSON, False),
        ("page.md:38-console", None, True),
        ("page.md:43-ini", None, True),
        ("page.md:47-marker", None, True),
        ("page.md:49-text", Kind.OUTPUT, False),
        ("page.md:54-yaml", None, True),
        ("page.md:59-cron", Kind.NOT_RUN, False),
    ]
    by_id = {e.id: e for e in examples}
    assert by_id["page.md:14-markdown"].text.startswith("```sh\n")
    assert by_id["page.md:20-plain"].text == "```yaml\ninside a tilde fence\n```\n"
    job = by_id["page.md:29-yaml"]
    assert job.text == "renderer: command\ncommand: copy\n"  # without the list item's indentation
    assert job.config is by_id["page.md:8-yaml"]
    assert job_problem(job) is None  # `copy` comes from the config above it
    assert by_id["page.md:38-console"].problem is not None
    assert by_id["page.md:38-console"].problem.startswith("unmarked example (```console")
    assert "needs a reason" in str(by_id["page.md:43-ini"].problem)
    assert "not on the line directly above a fence" in str(by_id["page.md:47-marker"].problem)
    assert "unknown example kind 'nonsense'" in str(by_id["page.md:54-yaml"].problem)
    assert by_id["page.md:59-cron"].reason == "a crontab line"
    assert json_problem(by_id["page.md:34-json"]) is None


def test_a_job_is_validated_against_its_pages_config_else_the_defaults() -> None:
    (job,) = collect("page.md", "```yaml\nrenderer: command\ncommand: copy\n```\n")
    assert job_problem(job) == (
        "page.md:1: invalid job: field 'command': "
        "expected one of the spool config's commands (none configured), got str 'copy'"
    )


TERMINAL_PAGE = """\
<!-- example: shell -->
```sh
spoolrender init /srv/spool
sleep 300 &
echo $! > ~/sleeper.pid
```

<!-- example: python -->
```python
from pathlib import Path
assert Path("/srv/spool/incoming").is_dir(), "the spool of the shell block above"
```

<!-- example: shell -->
```sh
test -d ~/my-video/node_modules/remotion   # the sample project, its packages linked
test ! -e scripts/quickstart.sh              # a directory of its own, not a checkout
false
```

<!-- example: shell -->
```sh
echo never run
```
"""


def test_a_pages_examples_share_one_terminal_and_its_background_processes_are_stopped(tmp_path: Path) -> None:
    chain = collect("page.md", TERMINAL_PAGE)
    terminal = Terminal(tmp_path / "t", project=REMOTION, link_node_modules=True,
                        spoolrender=Path(sys.executable).parent / "spoolrender", timeout=60)  # fmt: skip
    try:
        assert terminal.run_through(chain, chain[1]) is None  # the shell block ran first
        assert list(terminal.results) == [chain[0].id, chain[1].id]
        sleeper = psutil.Process(int((terminal.home / "sleeper.pid").read_text()))
        assert sleeper.is_running()
        failed = terminal.run_through(chain, chain[3])
        assert failed is not None
        assert failed.startswith(
            "page.md:22: not run, an earlier example of this page failed: page.md:15: exit status 1"
        )
        assert chain[3].id not in terminal.results
    finally:
        terminal.close()
    assert not sleeper.is_running() or sleeper.status() == psutil.STATUS_ZOMBIE


def test_a_block_that_never_ends_fails_on_the_timeout(tmp_path: Path) -> None:
    chain = collect("page.md", "<!-- example: shell -->\n```sh\nsleep 300\n```\n")
    terminal = Terminal(tmp_path / "t", project=REMOTION, link_node_modules=False, spoolrender=None, timeout=1)
    problem = terminal.run_through(chain, chain[0])
    terminal.close()
    assert problem is not None and problem.startswith("page.md:2: still running after 1 s")


# --- today's two broken examples (README.md at 8329ac5), exactly as they were -----------------

OLD_REMOTION_BLOCK = """\
```sh
pipx install ./spoolrender          # a checkout, or the wheel from `python -m build` (pip works too)
cd ~/my-video && npm ci             # your project, with its node_modules installed
spoolrender init /srv/spool --remotion-project ~/my-video
printf 'composition: HelloWorld\\noutput: hello.mp4\\n' > hello.yaml
spoolrender submit --spool /srv/spool hello.yaml
spoolrender run --drain --spool /srv/spool   # or a long-running `spoolrender run`
spoolrender status --spool /srv/spool        # the video is in /srv/spool/output/hello.mp4
```
"""
OLD_HOOKS_BLOCK = """\
```yaml
hooks:
  chat:                                   # a name: logs and delivery state use it
    on: [failed]                          # any of done, retry, failed (default: all three)
    url: https://chat.example/hooks/render
    secret_file: /etc/spoolrender/hook-secret   # optional: sign the body (HMAC-SHA256)
    timeout_seconds: 10                   # per delivery (default 10, at most 600)
    attempts: 10                          # deliveries tried before giving up (default 10)
    backoff_seconds: 10                   # first wait after a failure; doubles, capped at 15 min
  archive:
    on: [done]
    command: [/usr/local/bin/archive-video, --verbose]   # argv, never a shell string
```
"""


def test_the_old_readme_fails_unmarked() -> None:
    remotion, hooks = collect("README.md", f"{OLD_REMOTION_BLOCK}\n{OLD_HOOKS_BLOCK}")
    assert str(remotion.problem).startswith("unmarked example (```sh")
    assert hooks.kind is Kind.JOB  # unmarked ```yaml without `# spoolrender.yaml`
    # As a job file it is refused (job files keep YAML 1.1: its `on:` key is a boolean).
    assert "key 'on' is read as the boolean true" in str(job_problem(hooks))


def test_the_old_hooks_block_loads_as_a_config_fragment() -> None:
    # 8329ac5's loader read `on:` as the boolean key True and refused this block with
    # "hooks.chat: unknown key(s) True"; spoolrender.yaml is now read with YAML 1.2's
    # booleans (spoolrender.config.yaml_loader), so the block loads exactly as the README had it.
    (hooks,) = collect("README.md", f"<!-- example: config-fragment -->\n{OLD_HOOKS_BLOCK}")
    assert config_problem(hooks) is None


@_remotion_example
def test_the_old_remotion_block_fails_as_written(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    (block,) = collect("README.md", f"<!-- example: shell-remotion -->\n{OLD_REMOTION_BLOCK}")
    terminal = _make_terminal(request, tmp_path, True, [block])
    try:
        problem = terminal.run_through([block], block)
    finally:
        terminal.close()
    # Here pipx is not installed (127: command not found); where it is, ./spoolrender is
    # not there: the working directory holds the wheel, not a checkout.
    assert problem is not None and problem.startswith("README.md:2: exit status ")
    assert "pipx: command not found" in problem or "./spoolrender" in problem


# --- the README's "Use your own Remotion project" (issue 22 item 5) ------------------------


def _section_lines(page: str, name: str) -> range:
    """The lines of ``page``'s snippet section ``name`` (its ``--8<-- [start:name]`` markers)."""
    text = (REPO / page).read_text(encoding="utf-8")
    start = text.index(f"<!-- --8<-- [start:{name}] -->")
    end = text.index(f"<!-- --8<-- [end:{name}] -->", start)
    return range(text.count("\n", 0, start) + 1, text.count("\n", 0, end) + 1)


def test_the_own_project_commands_are_run_as_written() -> None:
    # The block a new user follows word for word (docs/install.md includes the section):
    # test_example runs it in a Remotion terminal of its own, against a lockfile-less copy
    # of remotion/ in a temp HOME, with the wheel of this checkout. Marking it not-run, or
    # splitting its install from its render, fails here.
    lines = _section_lines("README.md", "own-project")
    section = [e for e in EXAMPLES if e.page == "README.md" and e.line in lines]
    (block,) = [e for e in section if e.kind in RUN_KINDS]
    assert block.kind is Kind.SHELL_REMOTION and block in CHAINS[("README.md", True)]
    assert all(e.kind is Kind.NOT_RUN for e in section if e is not block)  # the apt-get one, as root
    for needed in (_INSTALLS_SPOOLRENDER, _INSTALLS_NPM_PACKAGES, re.compile(r"spoolrender run --drain")):
        assert needed.search(block.text), needed.pattern
    # Neither of issue 22's two: pipx (not on Debian 12) and `npm ci` alone (no starter has a lockfile).
    assert "pipx" not in block.text
    assert "npm install" in block.text
