"""A small real HTTP server for the http(s):// tests: serves a local directory with HEAD,
single byte ranges (206 + Content-Range), strong ETags and Last-Modified, honours If-Match and
If-Unmodified-Since (412), and logs every request (so tests count what ckpt sent, on the
server's side). ``ranges=False`` makes it answer every GET with the whole file (200), as a
server without Range support does; ``html_fallback=True`` answers a missing path with an HTML
page (``200 text/html``, ranges honoured), as single-page-app and static hosts with a rewrite
to ``index.html`` do. ``missing=403`` answers a missing path ``403 Forbidden``, as a public
S3/GCS bucket without list permission does.

Also a server to try ``ckpt`` on ``http://`` URLs by hand (``python -m http.server`` answers no
Range requests, so only ``list``/``map`` work through it)::

    python tests/http_server.py DIR [PORT]
"""

from __future__ import annotations

import email.utils
import hashlib
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class _QuietServer(ThreadingHTTPServer):
    """A server whose request errors go to ``errors``, not to ``sys.stderr``.

    The server runs in the test's own process, where ``CliRunner`` captures ``sys.stderr``: a
    client closing its connection early (normal for aiohttp's pool) would otherwise print a
    traceback into the command's captured stderr and fail the one-line-error checks at random.
    """

    def handle_error(self, request, client_address) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
            return
        self.errors.append(repr(exc))  # other failures stay visible to a test that looks


class FileServer:
    """Serves ``root`` on ``127.0.0.1`` (a free port) until :meth:`close`."""

    #: What ``html_fallback`` serves for every missing path.
    FALLBACK = b"<!doctype html>\n<html><head><title>app</title></head><body></body></html>\n"

    def __init__(self, root: Path, *, ranges: bool = True, conditional: bool = True,
                 port: int = 0, html_fallback: bool = False, missing: int = 404):
        self.root = Path(root)
        self.missing = missing  # the status a missing path gets (403: a bucket without List)
        self.ranges = ranges
        self.html_fallback = html_fallback
        self.fallback_type = "text/html; charset=utf-8"  # a test may make it text/plain
        self.conditional = conditional  # False: ignores If-Match (still sends its ETag)
        self.forbidden: set[str] = set()  # request paths answered 403
        self.log: list[str] = []  # "METHOD /path STATUS"
        self.bytes_sent = 0
        server_self = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _file(self):
                if self.path in server_self.forbidden:
                    return 403
                rel = self.path.split("?", 1)[0].lstrip("/")
                path = (server_self.root / rel).resolve()
                if server_self.root.resolve() not in path.parents or not path.is_file():
                    return None
                return path

            def _headers(self, path: Path, st) -> dict:
                tag = hashlib.md5(f"{st.st_mtime_ns}-{st.st_size}-{path}".encode()).hexdigest()
                return {"ETag": f'"{tag}"', "Accept-Ranges": "bytes" if server_self.ranges
                        else "none",
                        "Last-Modified": email.utils.formatdate(st.st_mtime, usegmt=True)}

            def _send(self, status: int, headers: dict, body: bytes = b"", head=False):
                server_self.log.append(f"{self.command} {self.path} {status}")
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)) if not head
                                 else headers.get("X-Length", "0"))
                self.end_headers()
                if not head and body:
                    self.wfile.write(body)
                    server_self.bytes_sent += len(body)

            def _fallback(self, head: bool):
                """The HTML page an SPA host serves for a missing path (200, or 206 for a
                range of it)."""
                page = server_self.FALLBACK
                headers = {"Content-Type": server_self.fallback_type, "ETag": '"app"'}
                if head:
                    return self._send(200, {**headers, "X-Length": str(len(page))}, head=True)
                m = _RANGE.match(self.headers.get("Range", ""))
                if not m or int(m.group(1)) >= len(page):
                    return self._send(200, headers, page)
                start = int(m.group(1))
                end = min(int(m.group(2)) if m.group(2) else len(page) - 1, len(page) - 1)
                self._send(206, {**headers, "Content-Range": f"bytes {start}-{end}/{len(page)}"},
                           page[start : end + 1])

            def do_HEAD(self):  # noqa: N802 (http.server's name)
                path = self._file()
                if path is None and server_self.html_fallback:
                    return self._fallback(head=True)
                if path is None or path == 403:
                    return self._send(server_self.missing if path is None else 403, {},
                                      head=True)
                st = path.stat()
                self._send(200, {**self._headers(path, st), "X-Length": str(st.st_size)},
                           head=True)

            def do_GET(self):  # noqa: N802
                path = self._file()
                if path is None and server_self.html_fallback:
                    return self._fallback(head=False)
                if path is None or path == 403:
                    return self._send(server_self.missing if path is None else 403, {}, b"no")
                st = path.stat()
                headers = self._headers(path, st)
                match = server_self.conditional and self.headers.get("If-Match")
                if match and match not in ("*", headers["ETag"]):
                    return self._send(412, headers, b"precondition failed")
                since = server_self.conditional and self.headers.get("If-Unmodified-Since")
                if since and int(st.st_mtime) > email.utils.parsedate_to_datetime(
                        since).timestamp():
                    return self._send(412, headers, b"precondition failed")
                data = path.read_bytes()
                m = _RANGE.match(self.headers.get("Range", ""))
                if not server_self.ranges or not m:
                    return self._send(200, headers, data)
                start = int(m.group(1))
                end = min(int(m.group(2)) if m.group(2) else len(data) - 1, len(data) - 1)
                if start >= len(data):
                    return self._send(416, {**headers,
                                            "Content-Range": f"bytes */{len(data)}"})
                self._send(206, {**headers,
                                 "Content-Range": f"bytes {start}-{end}/{len(data)}"},
                           data[start : end + 1])

        self.server = _QuietServer(("127.0.0.1", port), Handler)
        self.server.errors = []
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def since(self, start: int) -> list[str]:
        return self.log[start:]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def touch_later(path: Path) -> None:
    """Changes a file's ETag and Last-Modified without changing its bytes' length."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


def main(argv: list[str]) -> int:
    """``python tests/http_server.py DIR [PORT] [--html-fallback]``: serves DIR on 127.0.0.1
    until Ctrl-C (``--html-fallback``: a missing path is an HTML page, as on an SPA host)."""
    fallback = "--html-fallback" in argv
    argv = [a for a in argv if a != "--html-fallback"]
    if not 1 <= len(argv) <= 2 or not Path(argv[0]).is_dir():
        print("usage: python tests/http_server.py DIR [PORT] [--html-fallback]",
              file=sys.stderr)
        return 2
    server = FileServer(Path(argv[0]), port=int(argv[1]) if len(argv) > 1 else 8765,
                        html_fallback=fallback)
    print(f"serving {argv[0]} at {server.url}/ (Range, ETag); Ctrl-C stops", flush=True)
    try:
        server.thread.join()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
