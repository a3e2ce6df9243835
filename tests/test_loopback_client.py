"""The TensorBoard client reaches 127.0.0.1 directly, whatever the proxy variables say or once said.

urllib.request.urlopen's shared opener reads http_proxy at its first call and keeps it for the process. A
process that once ran with a proxy set (a user behind one; a test of an offline download) would send later
loopback requests to that proxy. These tests make that state for real and check the client is immune to it.
"""

import http.server
import threading
import urllib.error
import urllib.request

import pytest
from stepscope.tensorboard.tbserver import loopback_get

DEAD_PROXY = {"http_proxy": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "no_proxy": "",
              "NO_PROXY": ""}


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"hello": "loopback"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def loopback_url():
    srv = http.server.HTTPServer(("127.0.0.1", 0), _Hello)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_port}/data/plugins_listing"
    srv.shutdown()
    srv.server_close()


def test_loopback_get_ignores_a_proxy_set_now(loopback_url, monkeypatch):
    for k, v in DEAD_PROXY.items():
        monkeypatch.setenv(k, v)
    assert loopback_get(loopback_url, timeout_s=5) == b'{"hello": "loopback"}'


def test_loopback_get_ignores_a_proxy_that_urlopen_remembered(loopback_url, monkeypatch):
    monkeypatch.setattr(urllib.request, "_opener", None)  # a fresh shared opener, dropped again at the end
    for k, v in DEAD_PROXY.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen("http://example.invalid/", timeout=5)  # builds the shared opener, proxy inside
    for k in DEAD_PROXY:
        monkeypatch.delenv(k)
    with pytest.raises(urllib.error.URLError):  # the hazard is real: plain urlopen still uses the dead proxy
        urllib.request.urlopen(loopback_url, timeout=5)
    assert loopback_get(loopback_url, timeout_s=5) == b'{"hello": "loopback"}'
