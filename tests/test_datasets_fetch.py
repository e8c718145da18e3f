"""``fastkpca.datasets.fetch``: downloads from a local HTTP server on loopback (no network),
checks size and SHA-256, caches atomically, and never downloads a cached file twice."""

import hashlib
import http.server
import re
import threading

import numpy as np
import pytest
from conftest import SHARED_DATA

from fastkpca import datasets
from fastkpca.datasets import DATASETS, SOURCES, RemoteFile, fetch, load

GERMAN = "german/german.data-numeric"
GERMAN_BYTES = b"   1   6   4   1 \n   2  48   2   2 \n"


class _Server:
    """A loopback HTTP server serving ``files`` (URL path -> bytes) and counting requests."""

    def __init__(self, files):
        self.files = files
        self.requests: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.path)
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # keep the test output quiet
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No FASTKPCA_DATA, no development layout: only the homes a test names."""
    monkeypatch.delenv("FASTKPCA_DATA", raising=False)
    monkeypatch.setattr(datasets, "DEFAULT_DATA_HOME", tmp_path / "default-home")
    monkeypatch.setattr(datasets, "_checkout_root", lambda: None)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _serve_german(monkeypatch, server, body=GERMAN_BYTES, paths=("/german",)):
    """Point the german file's source at ``server`` with the hash and size of GERMAN_BYTES."""
    remote = RemoteFile(
        tuple(server.url + p for p in paths),
        hashlib.sha256(GERMAN_BYTES).hexdigest(),
        len(GERMAN_BYTES),
    )
    monkeypatch.setitem(SOURCES, GERMAN, remote)
    server.files["/german"] = body


def _leftovers(home):
    return [p.name for p in home.rglob("*") if p.is_file() and p.name != "german.data-numeric"]


def test_fetch_downloads_checks_caches_and_loads(isolated, monkeypatch):
    home = isolated / "cache"
    with _Server({}) as server:
        _serve_german(monkeypatch, server)
        X, y = fetch("german", data_home=home)
        np.testing.assert_array_equal(X, [[1, 6, 4], [2, 48, 2]])
        np.testing.assert_array_equal(y, [1, 2])
        assert (home / GERMAN).read_bytes() == GERMAN_BYTES
        assert _leftovers(home) == []  # the temporary file was renamed, nothing else written
        assert server.requests == ["/german"]
        # cached: neither fetch nor load downloads it again
        X2, _ = fetch("german", data_home=home)
        np.testing.assert_array_equal(X2, X)
        np.testing.assert_array_equal(load("german", home)[0], X)
        assert server.requests == ["/german"]


def test_fetch_uses_fastkpca_data_and_the_default_home(isolated, monkeypatch):
    with _Server({}) as server:
        _serve_german(monkeypatch, server)
        monkeypatch.setenv("FASTKPCA_DATA", str(isolated / "env-home"))
        fetch("german")
        assert (isolated / "env-home" / GERMAN).is_file()
        monkeypatch.delenv("FASTKPCA_DATA")
        fetch("german")  # the default home is another folder: downloaded there
        assert (isolated / "default-home" / GERMAN).is_file()
        assert load("german")[0].shape == (2, 3)
        assert server.requests == ["/german", "/german"]


def test_corrupted_download_is_refused_and_leaves_nothing(isolated, monkeypatch):
    home = isolated / "cache"
    corrupted = GERMAN_BYTES.replace(b"48", b"47")  # same size, other bytes
    with _Server({}) as server:
        _serve_german(monkeypatch, server, body=corrupted)
        with pytest.raises(
            OSError, match=r"could not download german.*SHA-256 [0-9a-f]{64} differ"
        ):
            fetch("german", data_home=home)
    assert not (home / GERMAN).exists()
    assert list(home.rglob("*.part")) == [] and _leftovers(home) == []


def test_download_longer_than_the_file_is_cut_short(isolated, monkeypatch):
    home = isolated / "cache"
    with _Server({}) as server:
        _serve_german(monkeypatch, server, body=GERMAN_BYTES * 3)
        with pytest.raises(OSError, match="more than the expected 36 bytes"):
            fetch("german", data_home=home)
        _serve_german(monkeypatch, server, body=GERMAN_BYTES[:-1])
        with pytest.raises(OSError, match="35 bytes, expected 36"):
            fetch("german", data_home=home)
    assert _leftovers(home) == [] and not (home / GERMAN).exists()


def test_mirrors_are_tried_in_order(isolated, monkeypatch):
    home = isolated / "cache"
    with _Server({}) as server:
        _serve_german(monkeypatch, server, paths=("/missing", "/german"))
        X, _ = fetch("german", data_home=home)
        assert X.shape == (2, 3)
        assert server.requests == ["/missing", "/german"]
        # no mirror works: every URL and its error is named
        monkeypatch.setitem(
            SOURCES, GERMAN, RemoteFile((server.url + "/a", server.url + "/b"), "0" * 64, 36)
        )
        with pytest.raises(OSError) as info:
            fetch("german", data_home=isolated / "other")
    message = str(info.value)
    assert "/a: HTTP Error 404" in message and "/b: HTTP Error 404" in message


def test_missing_file_message_names_fetch(isolated):
    with pytest.raises(FileNotFoundError, match=r"german\.data-numeric.*fetch\('german'\)"):
        load("german")
    with pytest.raises(FileNotFoundError, match=r"data home not found.*fetch\('german', data_home"):
        load("german", isolated / "nowhere")


def test_every_file_has_a_source():
    files = set()
    for spec in DATASETS.values():
        for rel in spec.files.values():
            files.update(rel if isinstance(rel, tuple) else (rel,))
    assert files == set(SOURCES)
    for remote in SOURCES.values():
        assert remote.urls and all(u.startswith("https://") for u in remote.urls)
        assert re.fullmatch(r"[0-9a-f]{64}", remote.sha256) and remote.size > 0


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"shared data not found at {SHARED_DATA}")
def test_sources_match_the_distributed_files():
    """The recorded hashes and sizes are those of the files as distributed.  The MNIST files
    of the shared data set were recompressed (same IDX content, other gzip bytes), so their
    recorded hashes are the published archives' (the ones torchvision checks) instead."""
    sums = dict(
        reversed(line.split()) for line in (SHARED_DATA / "SHA256SUMS").read_text().splitlines()
    )
    for rel, remote in SOURCES.items():
        if rel.startswith("mnist/"):
            continue
        assert sums[f"./{rel}"] == remote.sha256, rel
        assert (SHARED_DATA / rel).stat().st_size == remote.size, rel
