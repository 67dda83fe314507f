"""`SELECT * FROM models` and `python -m eval.models list` (``list_models``) show the same
registry: the embedded model without a registration, every registered model, and a
registration that replaces the embedded model's entry (real DuckDB catalog, temp WEFT_HOME)."""

import json

from eval.models import ModelSpec, list_models, register_model
from warehouse import Warehouse

FIELDS = ("model_id", "kind", "base_url", "served_model", "path", "api_key_env",
          "checkpoint_id", "baseline")


def _sql_rows(wh):
    rows = wh.sql(f"SELECT {', '.join(FIELDS)} FROM models ORDER BY model_id").to_pylist()
    return [tuple(r[f] for f in FIELDS) for r in rows]


def _registry_rows(wh):
    return sorted(tuple(getattr(s, f) for f in FIELDS) for s in list_models(wh))


def test_embedded_model_is_in_the_models_view_of_an_empty_warehouse(weft_home):
    wh = Warehouse()
    rows = _sql_rows(wh)
    assert [r[0] for r in rows] == ["smollm2-135m-instruct"]
    assert rows[0][4] == str(weft_home / "models" / "smollm2-135m-instruct")
    assert rows == _registry_rows(wh)


def test_models_view_agrees_with_the_registry_after_registrations(weft_home, tmp_path):
    wh = Warehouse()
    folder = tmp_path / "ckpt-7"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "model.safetensors").write_bytes(b"")  # the registry checks that weights exist
    register_model(ModelSpec(model_id="ckpt-7", kind="local", path=str(folder),
                             served_model="ckpt-7", checkpoint_id="ckpt-7"), wh)
    register_model(ModelSpec(model_id="gpu-model", kind="endpoint", base_url="http://h:8000/v1",
                             served_model="m", api_key_env="KEY"), wh)
    rows = _sql_rows(wh)
    assert [r[0] for r in rows] == ["ckpt-7", "gpu-model", "smollm2-135m-instruct"]
    assert rows == _registry_rows(wh)
    # a registration under the embedded model's id replaces its built-in row (one row, not two)
    register_model(ModelSpec(model_id="smollm2-135m-instruct", kind="endpoint",
                             base_url="http://other:8000/v1", served_model="smol"), wh)
    wh.refresh_catalog()  # the migration runs again on every refresh
    rows = _sql_rows(wh)
    assert [r[0] for r in rows].count("smollm2-135m-instruct") == 1
    assert rows == _registry_rows(wh)
    assert wh.sql("SELECT count(*) AS n FROM registered_models").to_pylist()[0]["n"] == 3
