"""The bench's writes-and-list section on its tiny scale: both savers, every
snapshot_frequency and list call, same answers, a section in the report."""

from __future__ import annotations

from langgraph_delta_postgres.bench import listput


def test_listput_section(dsn: str) -> None:
    logged: list[str] = []
    res = listput.run_listput(dsn, "tiny", logged.append)
    scale = listput.SCALES["tiny"]
    assert set(res["invoke"]) == {str(f) for f in scale.freqs}
    for e in res["invoke"].values():
        assert e["ours"]["n"] == e["official"]["n"] == scale.turns
        assert e["ratio_ours_official"]["n"] == scale.turns
    assert len(res["list"]) == 2 * len(listput.LIST_LIMITS)
    for m in res["list"].values():
        assert m["results_equal"]
        assert m["ours"]["n"] == m["official"]["n"] == scale.rounds
    big = res["big"]
    assert big["results_equal"] and big["mb"] == scale.big_mb
    for call in ("put", "get_tuple", "history"):
        assert big[call]["ours"]["n"] == big[call]["official"]["n"] == scale.big_rounds
    head = listput.headline({"listput": res})
    assert "invoke_snapshot_frequency_1" in head and "list_thread_limit1" in head
    assert "big_value_history" in head
    md = "\n".join(listput.markdown({"listput": res}))
    assert "list({\"thread_id\": T}, limit=10)" in md and "| 50 |" in md
    assert "| get_tuple |" in md
    assert any("ours/official" in line for line in logged)
