"""``/apidocs``: the OpenAPI description as a page that needs nothing from the internet.

Litestar's documentation pages (Swagger UI, ReDoc, ...) load their scripts
from a CDN, which the machines a broker runs on often cannot reach.  This
page is rendered on the server from the same OpenAPI document
(``/apidocs/openapi.json``): every path grouped by category, with its
methods, summaries, parameters and responses, and each category's
attributes.  No script at all.
"""

from __future__ import annotations

from html import escape
from typing import Any

from litestar import Request
from litestar.openapi.plugins import JsonRenderPlugin, OpenAPIRenderPlugin

__all__ = ["ApiDocsPage", "plugins"]

_STYLE = """<style>
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; padding: 0 1rem; color: #1d232b; }
h1 { margin-bottom: .2rem } h2 { margin-top: 2.5rem; border-bottom: 1px solid #ccd; }
.op { margin: .6rem 0; padding: .4rem .8rem; border-left: 4px solid #889; background: #f6f7f9; }
.method { display: inline-block; min-width: 4.5rem; font-weight: 600; font-family: monospace; }
code { font-size: .95em } table { border-collapse: collapse; margin: .3rem 0 } td, th { padding: .15rem .6rem; text-align: left; vertical-align: top; border-bottom: 1px solid #e3e5e8; }
.get { border-color: #2f6fb3 } .post { border-color: #2f9a5b } .put { border-color: #b3802f } .delete { border-color: #b33a2f }
</style>"""
_METHODS = ("get", "put", "post", "delete")


class ApiDocsPage(OpenAPIRenderPlugin):
    """The OpenAPI document rendered as one HTML page, on the server."""

    def __init__(self, *, path: str = "/", **kwargs: Any) -> None:
        super().__init__(path=path, favicon="", style=_STYLE, **kwargs)

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        return render_page(openapi_schema, json_url=f"{request.url.path.rstrip('/')}/openapi.json"
                           if not request.url.path.endswith(".json") else request.url.path).encode()


def plugins() -> list[OpenAPIRenderPlugin]:
    """``/apidocs`` (this page) and ``/apidocs/openapi.json`` (the document)."""
    return [ApiDocsPage(path="/"), JsonRenderPlugin(path="/openapi.json")]


def render_page(document: dict[str, Any], *, json_url: str) -> str:
    info = document.get("info", {})
    out = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
           f"<title>{escape(str(info.get('title', 'API')))}</title>", _STYLE, "</head><body>",
           f"<h1>{escape(str(info.get('title', 'API')))} <small>{escape(str(info.get('version', '')))}</small></h1>",
           f"<p>{escape(str(info.get('description', '')))}</p>",
           f"<p>The OpenAPI document: <a href='{escape(json_url)}'>{escape(json_url)}</a>.</p>"]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in sorted((document.get("paths") or {}).items()):
        for method in _METHODS:
            operation = item.get(method)
            if operation is not None:
                for tag in operation.get("tags") or ["other"]:
                    by_tag.setdefault(tag, []).append((method, path, operation))
    schemas = (document.get("components") or {}).get("schemas") or {}
    out.append("<nav><ul>" + "".join(f"<li><a href='#tag-{escape(tag)}'>{escape(tag)}</a></li>"
                                      for tag in sorted(by_tag)) + "</ul></nav>")
    for tag in sorted(by_tag):
        out.append(f"<h2 id='tag-{escape(tag)}'>{escape(tag)}</h2>")
        schema = schemas.get(tag)
        if schema and schema.get("properties"):
            out.append("<details><summary>Attributes</summary><table><tr><th>name</th><th>type</th>"
                       "<th>description</th></tr>")
            for name, prop in sorted(schema["properties"].items()):
                out.append(f"<tr><td><code>{escape(name)}</code></td><td>{escape(_type(prop))}</td>"
                           f"<td>{escape(str(prop.get('description') or ''))}</td></tr>")
            out.append("</table></details>")
        for method, path, operation in by_tag[tag]:
            out.append(f"<div class='op {method}'><span class='method'>{method.upper()}</span> "
                       f"<code>{escape(path)}</code>")
            summary = operation.get("summary") or operation.get("description")
            if summary:
                out.append(f"<div>{escape(str(summary))}</div>")
            parameters = operation.get("parameters") or []
            if parameters:
                out.append("<table>" + "".join(
                    f"<tr><td><code>{escape(str(p.get('name')))}</code></td><td>{escape(str(p.get('in')))}</td>"
                    f"<td>{escape(str(p.get('description') or ''))}</td></tr>" for p in parameters) + "</table>")
            responses = operation.get("responses") or {}
            if responses:
                out.append("<div>Responses: " + ", ".join(
                    f"{escape(code)} {escape(str(r.get('description', '')))}" for code, r in responses.items())
                    + "</div>")
            out.append("</div>")
    out.append("</body></html>")
    return "".join(out)


def _type(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    kind = str(prop.get("type", "any"))
    if kind == "array":
        return f"list of {_type(prop.get('items') or {})}"
    if prop.get("enum"):
        return f"{kind}: {' | '.join(map(str, prop['enum']))}"
    return kind
