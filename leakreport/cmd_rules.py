"""``leakreport rules``: list and test rule packs (the harness pack authors use too)."""

from __future__ import annotations

import sys

import click

from analyzer import exitcodes
from leakreport.common import die, err, load_packs, verbosity_options
from leakreport.options import rule_timeout_option

_PACK = click.option(
    "--pack",
    "packs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Rule pack folder (pack.toml, rules/, tests/); repeatable.",
)


@click.group()
def rules() -> None:
    """List and test rule packs (one SQL file per rule, test cases as data).

    \b
    Examples:
      leakreport rules list --pack ./my-pack
      leakreport rules test --pack ./my-pack --no-builtin
    """


@rules.command("list")
@_PACK
@verbosity_options
def rules_list(packs: tuple[str, ...]) -> None:
    """List the loaded rules, and rules that failed to load (then exit 2).

    \b
    Example:
      leakreport rules list --pack ./my-pack
    """
    loaded = load_packs(packs)
    click.echo(f"{'RULE':8} {'SEVERITY':8} {'CATEGORY':32} {'NAME':40} [PACK] TITLE")
    for p in loaded:
        for r in p.rules:
            click.echo(f"{r.id:8} {r.severity:8} {r.category:32} {r.name:40} [{p.name}] {r.title}")
        for e in p.errors:
            click.echo(f"{e.rule_id:8} ERROR    {e}")
    if any(p.errors for p in loaded):
        sys.exit(exitcodes.ERROR)


@rules.command(
    "test",
    epilog="Exit codes: 0 every case passed (and, with --mutate, every mutant was killed or "
    "listed as equivalent), 1 with --mutate: mutants survived or equivalent entries are stale, "
    "2 a case failed or a rule broke.",
)
@_PACK
@click.option("--no-builtin", is_flag=True, help="Test only the --pack folders.")
@click.option(
    "--mutate",
    is_flag=True,
    help="Then change each rule's SQL one way at a time (comparisons, $parameters, WHERE/HAVING "
    "conjuncts, CASE conditions) and list the changes no case catches, with file and line.",
)
@click.option("--rule", "only", multiple=True, help="Only this rule's cases; repeatable.")
@rule_timeout_option(
    "Stop a rule that runs longer than this in a case; the case fails (rule errored)."
)
@click.option(
    "--boundary",
    is_flag=True,
    help="With --mutate: also move each comparison to its boundary (>= to >): killed only by "
    "a case whose measure equals the bound exactly.",
)
@verbosity_options
def rules_test(
    packs: tuple[str, ...],
    no_builtin: bool,
    mutate: bool,
    only: tuple[str, ...],
    rule_timeout: float,
    boundary: bool,
) -> None:
    """Run the rule test cases shipped in each pack's tests/ folder.

    With --mutate, a mutant that no case kills is a bug the cases would let
    through: add a case that fires and one that must not, or list it in the
    rule's metadata as equivalent = [{mutant = "ID", reason = "..."}].

    \b
    Example:
      leakreport rules test --pack ./my-pack --no-builtin
      leakreport rules test --mutate --rule HR001
      leakreport rules test --rule GM001 --rule-timeout 10
    """
    from analyzer.ruletest import collect_cases, run_case

    loaded = load_packs(packs, no_builtin)
    known = {r.id for p in loaded for r in p.rules}
    if set(only) - known:
        die(f"--rule: no rule {', '.join(sorted(set(only) - known))} is loaded")
    broken: list[str] = []  # test files that cannot be read: said, the rest still run
    failed = total = 0
    cases = collect_cases(loaded, broken)
    # a rule no case runs passed in silence: it is a failure (one case where it must fire,
    # one where it must not, is what makes a rule trusted)
    have = {c.rule_id for c in cases}
    untested = [
        r for p in loaded for r in p.rules if r.id not in have and (not only or r.id in only)
    ]
    for case in cases:
        if only and case.rule_id not in only:
            continue
        total += 1
        problems = run_case(case, loaded, rule_timeout)
        click.echo(f"{'ok' if not problems else 'FAIL':4} {case.id}")
        for p in problems:
            click.echo(f"     {p}")
        failed += bool(problems)
    for line in broken:
        click.echo(f"FAIL {line}")
    for r in untested:
        click.echo(
            f"FAIL {r.id}: no test case ({r.path.parent.parent / 'tests' / (r.id + '.toml')}: "
            "one where it must fire, one where it must not)"
        )
    click.echo(
        f"{total - failed} passed, {failed} failed"
        + (f", {len(broken)} test files not read" if broken else "")
        + (f", {len(untested)} rules without a case" if untested else "")
    )
    if total == 0 and not broken:
        err("leakreport: no test cases found (tests/<RULE>.toml in each pack)")
    errors = sum(len(p.errors) for p in loaded)
    if failed or errors or broken or untested or total == 0:
        sys.exit(exitcodes.ERROR)
    if mutate:
        from analyzer import mutate as mut

        ops = mut.OPERATORS if boundary else mut.DEFAULT_OPERATORS
        results = mut.check_packs(loaded, set(only) if only else None, ops=ops)
        click.echo(mut.report(results))
        sys.exit(exitcodes.OK if mut.passed(results) else exitcodes.FINDINGS)
    sys.exit(exitcodes.OK)
