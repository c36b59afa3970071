"""The paper's own 3D results under both assumption sets (the ``paper-findings`` study): the rows of
``deepstack accuracy paper`` as a study run, so the results page carries the paper-vs-default table."""

from __future__ import annotations

from deepstack.search.studies import StudyContext, runner

TABLE4_COLUMNS = ["row", "schedule", "paper_stps", "paper_set_stps", "paper_set_feasible", "default_set_stps",
                  "ratio", "verdict"]
FINDING_COLUMNS = ["finding", "what", "paper", "paper_set", "default_set", "verdict"]


@runner("paper_findings")
def paper_findings(ctx: StudyContext) -> None:
    """Table 4 configuration by configuration and the findings the accuracy check computes, each under the
    paper and the default assumption set (the run's own ``assumptions`` parameter does not apply: both sets are
    always evaluated)."""
    from deepstack.accuracy.paper import paper_accuracy  # the check itself: one implementation of both

    result = paper_accuracy()
    table4 = [{**row, "ratio": row["ratio"]} for row in result["table4"]]
    findings = [{k: (", ".join(v) if isinstance(v, list) else v) for k, v in f.items()} for f in result["findings"]]
    ctx.write_csv("points.csv", table4)
    summary = result["summary"]
    ctx.write_summary(
        f"{summary['table4_within_10pct']} of {summary['table4_rows']} Table 4 rows come within 10 % of the "
        f"paper's STPS under the paper assumption set (MAPE {summary['table4_mape_pct']:.1f} %); `default_set` is "
        "the same configuration under this project's assumptions (docs/model.md §17 lists where they differ).\n\n"
        + ctx.key_table("Table 4, STPS: the paper's and ours under each assumption set", table4, TABLE4_COLUMNS)
        + "\n\n"
        + ctx.key_table("The paper's findings: its value, ours under the paper and the default set", findings,
                        FINDING_COLUMNS)
        + "\n\n"
        + ctx.key_table("Which assumption moves the results: each choice of the paper set back at the default "
                        "alone (Table 4 MAPE, totals step 7 / step 1, and the conclusions it flips)",
                        result["assumption_effects"],
                        ["assumption back at default", "table4_mape_pct", "b4_total", "b1024_total", "flips"]))
