"""`make test` fails when the code a cluster job runs through changed since the multi-node suite last passed
(tests/launch/multinode_stamp.py): the suite stays outside `make test` (2-node cluster, ~12-16 min) without rotting."""

from __future__ import annotations

import json

from tests.launch import multinode_stamp


def test_the_multinode_suite_passed_on_this_code():
    stale = multinode_stamp.changed()
    assert not stale, (
        f"changed since `make test-multinode` last passed: {stale}; run it (it rewrites "
        "tests/launch/multinode_stamp.json when green) and commit the stamp"
    )


def test_a_changed_watched_file_makes_the_stamp_stale(tmp_path):
    (tmp_path / "verl_ext/launch").mkdir(parents=True)
    job = tmp_path / "verl_ext/launch/job.py"
    job.write_text("a = 1\n")
    stamp = tmp_path / "stamp.json"
    stamp.write_text(json.dumps({"files": multinode_stamp.digests(tmp_path)}))
    assert multinode_stamp.changed(tmp_path, stamp) == []
    job.write_text("a = 2\n")
    (tmp_path / "verl_ext/launch/new.py").write_text("")
    assert multinode_stamp.changed(tmp_path, stamp) == ["verl_ext/launch/job.py", "verl_ext/launch/new.py"]
    assert multinode_stamp.changed(tmp_path, tmp_path / "none.json") == [
        "verl_ext/launch/job.py",
        "verl_ext/launch/new.py",
    ]
