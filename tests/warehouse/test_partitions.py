"""warehouse.partitions: one spelling of a partition key, its folder name, and the refusals."""

from __future__ import annotations

import pytest

from warehouse import Lineage, Warehouse
from warehouse.partitions import (
    eval_partition,
    partition_dir_name,
    partition_from_dir,
    partition_key,
    split_partition,
)


def test_keys_join_their_parts_with_a_bar_in_order():
    assert eval_partition("gsm8k", "smollm2-135m-instruct") == "gsm8k|smollm2-135m-instruct"
    assert partition_key("gsm8k", "m1", "j") == "gsm8k|m1|j"
    assert split_partition("gsm8k|m1|j") == ["gsm8k", "m1", "j"]


@pytest.mark.parametrize("parts, message", [
    ((), "at least one part"),
    (("gsm8k", ""), "non-empty strings"),
    (("gsm8k", "a|b"), "contains '|'"),
])
def test_bad_parts_are_refused_with_the_reason(parts, message):
    with pytest.raises(ValueError, match=message):
        partition_key(*parts)


@pytest.mark.parametrize("key, folder", [
    ("gsm8k|m1", "gsm8k|m1"),
    ("gsm8k|m1:handoff:j:senior-first", "gsm8k|m1:handoff:j:senior-first"),
    ("eval_samples/gsm8k|m1/run 1", "eval_samples%2Fgsm8k|m1%2Frun%201"),
    ("100%", "100%25"),
    ("..", "%2E."),
    (".hidden", "%2Ehidden"),
])
def test_folder_names_are_the_key_where_the_file_system_allows(key, folder):
    assert partition_dir_name(key) == folder
    assert partition_from_dir(folder) == key


def test_a_partition_reads_back_from_its_folder_under_its_key(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    for key in ("gsm8k|m1", "..", "a/b|c"):
        wh.write("problems", [{"problem_id": key}], lineage=Lineage(partition=key))
    assert sorted(wh.partitions("problems")) == sorted(["gsm8k|m1", "..", "a/b|c"])
    assert wh.read("problems", partition="..").column("problem_id").to_pylist() == [".."]
    # nothing was written outside the table's folder
    assert sorted(p.name for p in (tmp_path / "wh").iterdir()
                  if p.name not in ("catalog.duckdb", "catalog.lock")) == ["problems"]
    assert wh.sql("SELECT partition FROM problems ORDER BY 1").column("partition").to_pylist() \
        == sorted(["gsm8k|m1", "..", "a/b|c"])
