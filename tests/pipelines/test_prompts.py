"""The one prompt loader: every shipped prompt loads, and bad files or placeholders fail with a
message that says what is wrong."""

from pathlib import Path

import pytest

from pipelines.prompts import PROMPTS_DIR, PromptFile, fill, load_prompt, prompt_path, render

SHIPPED = sorted(p.stem for p in PROMPTS_DIR.glob("*.md"))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_prompt_loads_by_name_and_by_path(name):
    by_name = load_prompt(name)
    assert by_name == load_prompt(prompt_path(name)) == load_prompt(str(prompt_path(name)))
    assert by_name.system.strip() and by_name.user.strip()
    assert "<!--" not in by_name.system + by_name.user + by_name.repair


def test_shipped_prompts_are_the_ones_the_pipelines_use():
    assert {"sxs_judge", "mosaic_manager", "mosaic_actor", "mosaic_baseline",
            "ep_assistant_main", "ep_assistant_triage", "ep_kitchen_controller"} <= set(SHIPPED)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.md"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, kwargs, expected", [
    ("# system\nS\n# user\nU {{x}}\n", {}, PromptFile("S", "U {{x}}")),
    ("<!-- note -->\n# system\nS <!-- inline -->\n# user\nU\n# repair\nR\n", {"need_repair": True},
     PromptFile("S ", "U", "R")),
    ("# system\n\nS\n\n# user\nU\n", {}, PromptFile("S", "U")),
    ("#  system\nnot a heading\n# system\nS\n# user\nU\n", {}, PromptFile("S", "U")),
])
def test_sections_table(tmp_path, text, kwargs, expected):
    assert load_prompt(write(tmp_path, text), **kwargs) == expected


@pytest.mark.parametrize("text, kwargs, message", [
    ("# system\nonly a system part\n", {}, r"needs non-empty sections \['system', 'user'\]"),
    ("# system\n\n# user\nU\n", {}, "non-empty"),
    ("# system\nS\n# user\nU\n", {"need_repair": True}, "'repair'"),
    ("# system\nS\n# user\nU\n# user\nV\n", {}, r"sections \['user'\] appear more than once"),
])
def test_bad_files_say_what_is_wrong(tmp_path, text, kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_prompt(write(tmp_path, text), **kwargs)


def test_a_missing_file_names_itself(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.md"):
        load_prompt(tmp_path / "missing.md")
    with pytest.raises(FileNotFoundError, match="no_such_prompt.md"):
        load_prompt("no_such_prompt")


def test_fill_is_one_pass_and_refuses_unknown_placeholders():
    # a value that itself looks like a placeholder is inserted as is, never filled again
    assert fill("a {{x}} b {{y}}", {"x": "{{y}}", "y": 2}) == "a {{y}} b 2"
    assert fill("no placeholders", {}) == "no placeholders"
    with pytest.raises(ValueError, match=r"unknown placeholder \{\{z\}\} in the test; known: "
                                         r"\{\{x\}\}"):
        fill("{{z}}", {"x": 1}, "the test")
    messages = render(PromptFile("sys {{x}}", "user {{x}}"), {"x": "v"})
    assert messages == [{"role": "system", "content": "sys v"},
                        {"role": "user", "content": "user v"}]
