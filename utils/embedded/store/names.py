"""Model names as Ollama reads them (types/model/name.go): `[host/][namespace/]model[:tag]`.

The host defaults to registry.ollama.ai, the namespace to library and the tag to latest, so
`smollm2:135m`, `library/smollm2:135m` and `registry.ollama.ai/library/smollm2:135m` are one model,
and a bare `smollm2` means `smollm2:latest`. Names compare case-insensitively. The canonical
spelling drops the default host and namespace: `smollm2:135m`, `someone/model:tag`. Nothing that
looks like a path (`..`, `./x`, a trailing `/`, a NUL) is a name.
"""

from __future__ import annotations

import re

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
_PART = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,79}$")
_HOST = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,349}(:\d{1,5})?$")
_TAG = re.compile(r"^[a-z0-9_][a-z0-9_.-]{0,79}$")


def canonical(name: str) -> str | None:
    """The canonical spelling of a model name, or None when it is not a valid name."""
    name = name.strip().lower()
    if not name or any(c.isspace() or c in "\\%~" for c in name):
        return None
    path, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", DEFAULT_TAG)
    if not _TAG.match(tag):
        return None
    parts = path.split("/")
    if len(parts) > 3:
        return None
    host = parts[0] if len(parts) == 3 else DEFAULT_HOST
    namespace = parts[-2] if len(parts) >= 2 else DEFAULT_NAMESPACE
    model = parts[-1]
    if not _HOST.match(host) or not _PART.match(namespace) or not _PART.match(model) or ".." in model:
        return None
    if host != DEFAULT_HOST:
        return f"{host}/{namespace}/{model}:{tag}"
    if namespace != DEFAULT_NAMESPACE:
        return f"{namespace}/{model}:{tag}"
    return f"{model}:{tag}"


def family(name: str) -> str:
    """`smollm2:135m` -> `smollm2`: the name without its tag."""
    return name.rsplit(":", 1)[0]


def not_found(requested: str, installed: list[str]) -> str:
    """Ollama's 404 message, naming the installed tags of the same model when there are any (a bare
    `smollm2` is `smollm2:latest`, which is easy to miss when only `smollm2:135m` is installed)."""
    message = f"model '{requested}' not found"
    wanted = canonical(requested)
    if wanted is None:
        return message
    tags = sorted(n for n in installed if family(n) == family(wanted))
    if tags:
        bare = "" if ":" in requested.rsplit("/", 1)[-1] else f" (a name without a tag means {wanted})"
        message += f"{bare}; installed: {', '.join(tags)}"
    return message
