"""Which tags Ollama splits a model's thinking by (utils/thinking.py ollama_tags: thinking.InferTags on
the model's Go template), on templates written the ways Ollama's library writes them; no model."""

from __future__ import annotations

import pytest

from utils.thinking import ollama_tags

THINK = ("<think>", "</think>")


@pytest.mark.parametrize("template, tags", [
    # The library's form: the block in an `if` inside the range over the messages.
    ("{{ range .Messages }}{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ .Content }}{{ end }}", THINK),
    # Whitespace around the tags is trimmed; trim markers are applied first.
    ("{{- range $i, $_ := .Messages }}\n{{- if .Thinking }}\n<think>\n{{ .Thinking }}\n</think>\n\n{{- end }}"
     "{{ .Content }}{{ end }}", THINK),
    # Other tags are read, not assumed.
    ("{{ range .Messages }}{{ if .Thinking }}[THINK]{{ .Thinking }}[/THINK]{{ end }}{{ end }}",
     ("[THINK]", "[/THINK]")),
    # A comment holding "}}" is no action; an else-if chain keeps its lists.
    ("{{/* a }} b */}}{{ range .Messages }}{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ else if .Content }}x"
     "{{ else }}y{{ end }}{{ end }}", THINK),
    # Not a field: a variable's (`$m.Thinking`) is not what InferTags looks for.
    ("{{ range $m := .Messages }}{{ if $m.Thinking }}<think>{{ $m.Thinking }}</think>{{ end }}{{ end }}", None),
    # Outside a range over .Messages: no tags.
    ("{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}", None),
    ("{{ range .Tools }}{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ end }}", None),
    # A list that does not end with text: no closing tag, so no split.
    ("{{ range .Messages }}{{ if .Thinking }}<think>{{ .Thinking }}{{ end }}{{ end }}", None),
    # A template Go cannot parse, and a Jinja one.
    ("{{ range .Messages }}{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}", None),
    ("{% for m in messages %}<think>{{ m.thinking }}</think>{% endfor %}", None),
])
def test_tags_as_infer_tags_finds_them(template, tags):
    assert ollama_tags(template) == tags
