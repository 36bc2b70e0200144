"""gym-exporter's web configuration (exporter-toolkit format) with a real
client: TLS with and without a client certificate, basic auth right and
wrong, bad web configuration files at start and on reload."""
import base64
import os
import pathlib
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import warnings

import pytest

from pace import HTTP_S, STOP_S

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import crypt

SOURCE = os.environ.get("GYM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("GYM_BUILD_DIR", os.path.join(SOURCE, "build"))
EXPORTER = os.path.join(BUILD, "exporter", "gym-exporter")


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki():
    d = tempfile.mkdtemp(prefix="gym-pki-")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
            "-subj", "/CN=gym-test-ca", "-days", "2", cwd=d)
    for name, san in (("server", "IP:127.0.0.1"), ("client", "DNS:prometheus")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write(f"subjectAltName={san}\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
                cwd=d)
    yield d
    shutil.rmtree(d, ignore_errors=True)  # keys: never left behind


class Exporter:
    def __init__(self, web_config_text, tmp, threads=None):
        self.tmp = tmp
        self.web = os.path.join(tmp, "web.yml")
        with open(self.web, "w") as f:
            f.write(web_config_text)
        self.log = os.path.join(tmp, "exporter.log")
        args = [EXPORTER, f"--web.config.file={self.web}", f"--registry.dir={tmp}/registry",
                "--web.listen-address=127.0.0.1:0"]
        if threads:  # that many connections at once
            config = os.path.join(tmp, "gym.yml")
            with open(config, "w") as f:
                f.write(f"web:\n  max_connections: {threads}\n")
            args.append(f"--config.file={config}")
        self.proc = subprocess.Popen(args, stderr=open(self.log, "w"))
        self.port = None
        for _ in range(3000):  # 30 s: a sanitized exporter starts 1,024 workers
            m = re.search(r"\(port (\d+)\)", open(self.log).read())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=STOP_S)


@pytest.fixture
def exporter(tmp_path):
    started = []

    def start(text, threads=None):
        e = Exporter(text, str(tmp_path), threads)
        started.append(e)
        return e
    yield start
    for e in started:
        e.stop()


def get(url, context=None, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, context=context, timeout=HTTP_S) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers


def tls_context(pki, client_cert=False):
    ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
    if client_cert:
        ctx.load_cert_chain(os.path.join(pki, "client.crt"), os.path.join(pki, "client.key"))
    return ctx


def plain_http(port, request):
    """What the server answers `request` on a plain TCP connection, whole."""
    with socket.create_connection(("127.0.0.1", port), timeout=HTTP_S) as s:
        s.sendall(request)
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    return reply


def test_tls_serves_https_and_answers_plain_http_with_400(exporter, pki):
    e = exporter(f"tls_server_config:\n  cert_file: {pki}/server.crt\n"
                 f"  key_file: {pki}/server.key\n", threads=1)
    assert e.port, open(e.log).read()
    status, body = get(f"https://127.0.0.1:{e.port}/metrics", tls_context(pki))
    assert status == 200 and b"gym_exporter_build_info" in body
    # As Go's servers answer it: 400, saying why, then the connection closes.
    for _ in range(2):
        reply = plain_http(e.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert reply.startswith(b"HTTP/1.0 400 Bad Request\r\n"), reply
        assert b"Client sent an HTTP request to an HTTPS server." in reply
    # Anything else that is not TLS: closed without a word.
    assert plain_http(e.port, b"\x00\x01garbage\r\n\r\n") == b""
    # The same single worker still serves TLS (no error left behind for it).
    status, body = get(f"https://127.0.0.1:{e.port}/metrics", tls_context(pki))
    assert status == 200 and b"gym_exporter_build_info" in body


def test_a_tls_handshake_split_across_packets_is_served(exporter, pki):
    """A ClientHello that arrives in two pieces (the second not starting
    like a TLS record) is one handshake, not plain bytes to refuse."""
    e = exporter(f"tls_server_config:\n  cert_file: {pki}/server.crt\n"
                 f"  key_file: {pki}/server.key\n")
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = tls_context(pki).wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with socket.create_connection(("127.0.0.1", e.port), timeout=HTTP_S) as s:
        def pump(step):
            while True:
                try:
                    return step()
                except ssl.SSLWantReadError:
                    if out := outgoing.read():
                        s.sendall(out)
                    data = s.recv(65536)
                    assert data, "the server closed the connection"
                    incoming.write(data)
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        hello = outgoing.read()
        s.sendall(hello[:5])  # the record header alone
        time.sleep(0.3)
        s.sendall(hello[5:])
        pump(tls.do_handshake)
        tls.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        s.sendall(outgoing.read())
        reply = b""
        while True:
            try:
                chunk = pump(lambda: tls.read(65536))
            except (ssl.SSLZeroReturnError, AssertionError):
                break
            if not chunk:
                break
            reply += chunk
            if b"gym_exporter_build_info" in reply:
                break
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n"), reply[:200]
    assert b"gym_exporter_build_info" in reply


def test_tls_needs_no_writable_temporary_directory(pki):
    # /tmp read-only (in a private mount namespace) and $TMPDIR missing: the key
    # goes to memory, never to a file, so nothing can be left behind either.
    tmp_path = pathlib.Path(tempfile.mkdtemp(dir="/var/tmp"))
    for f in ("server.crt", "server.key"):
        shutil.copy(os.path.join(pki, f), tmp_path / f)
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {tmp_path}/server.crt\n"
                   f"  key_file: {tmp_path}/server.key\n")
    log = tmp_path / "exporter.log"
    # A read-only view of /tmp (the build may live there, so it stays readable).
    script = ("mount --bind /tmp /tmp && mount -o remount,bind,ro /tmp && "
              "exec \"$0\" \"$@\"")
    proc = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, EXPORTER,
         f"--web.config.file={web}", f"--registry.dir={tmp_path}/registry",
         "--web.listen-address=127.0.0.1:0"],
        stderr=open(log, "w"), env={**os.environ, "TMPDIR": f"{tmp_path}/missing"})
    try:
        port = None
        for _ in range(3000):  # 30 s: a sanitized exporter starts 1,024 workers
            m = re.search(r"\(port (\d+)\)", log.read_text())
            if m:
                port = int(m.group(1))
                break
            if proc.poll() is not None:
                break
            time.sleep(0.01)
        assert port, log.read_text()
        assert get(f"https://127.0.0.1:{port}/metrics", tls_context(pki))[0] == 200
    finally:
        proc.kill()
        proc.wait(timeout=STOP_S)
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_required_client_certificate_is_enforced(exporter, pki):
    e = exporter(f"tls_server_config:\n  cert_file: {pki}/server.crt\n"
                 f"  key_file: {pki}/server.key\n"
                 f"  client_auth_type: RequireAndVerifyClientCert\n"
                 f"  client_ca_file: {pki}/ca.crt\n")
    assert e.port, open(e.log).read()
    status, _ = get(f"https://127.0.0.1:{e.port}/metrics", tls_context(pki, client_cert=True))
    assert status == 200
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"https://127.0.0.1:{e.port}/metrics",
                               context=tls_context(pki), timeout=HTTP_S).read()


def basic(user, password):
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_basic_auth_right_and_wrong(exporter):
    hashed = crypt.crypt("s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 4))
    e = exporter(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    assert e.port, open(e.log).read()
    url = f"http://127.0.0.1:{e.port}/metrics"
    status, headers = get(url)
    assert status == 401
    assert headers["WWW-Authenticate"] == 'Basic realm="gym-exporter"'
    assert get(url, headers=basic("prometheus", "wrong"))[0] == 401
    assert get(url, headers=basic("nobody", "s3cret"))[0] == 401
    assert get(url, headers={"Authorization": "Basic !!!notbase64"})[0] == 401
    status, body = get(url, headers=basic("prometheus", "s3cret"))
    assert status == 200 and b"gym_exporter_build_info" in body
    assert get(f"http://127.0.0.1:{e.port}/-/healthy")[0] == 401, "every path is protected"


def test_tls_and_basic_auth_together(exporter, pki):
    hashed = crypt.crypt("pw", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 4))
    e = exporter(f"tls_server_config:\n  cert_file: {pki}/server.crt\n  key_file: {pki}/server.key\n"
                 f"basic_auth_users:\n  p: '{hashed}'\n")
    url = f"https://127.0.0.1:{e.port}/metrics"
    assert get(url, tls_context(pki))[0] == 401
    assert get(url, tls_context(pki), basic("p", "pw"))[0] == 200


@pytest.mark.parametrize("text,needle", [
    ("tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n",
     "cannot read /nonexistent.crt"),
    ("tls_server_config:\n  cert_file: x\n", "needs cert_file and key_file"),
    ("basic_auth_users:\n  p: plaintext\n", "web.yml:2:6: the password of 'p' must be a bcrypt hash"),
    ("tls_config:\n  cert_file: x\n", "web.yml:1:1: unknown key 'tls_config'"),
    ("tls_server_config:\n  min_version: SSL3\n", "min_version 'SSL3'"),
    ("tls_server_config:\n  client_auth_type: RequireAnyClientCert\n", "is not supported"),
    ("basic_auth_users: [\n", "invalid YAML"),
    ("tls_server_config:\n  max_version: TLS14\n", "max_version 'TLS14'"),
    ("tls_server_config:\n  min_version: TLS13\n  max_version: TLS12\n",
     "max_version TLS12 is below min_version TLS13"),
    ("tls_server_config:\n  cipher_suites: [ECDHE-RSA-AES128-GCM-SHA256]\n",
     "cipher suite 'ECDHE-RSA-AES128-GCM-SHA256' is not one of Go's"),
    ("http_server_config:\n  headers:\n    X-Powered-By: gym\n",
     "header 'X-Powered-By' cannot be set"),
    ("http_server_config:\n  headers:\n    X-Frame-Options: \"deny\\r\\nSet-Cookie: a=b\"\n",
     "must be one non-empty line"),
    ("http_server_config:\n  http2: maybe\n", "http2"),
])
def test_a_bad_web_config_is_a_clear_error_at_start(tmp_path, text, needle):
    web = tmp_path / "web.yml"
    web.write_text(text)
    r = subprocess.run([EXPORTER, f"--web.config.file={web}", "--check-config"],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert needle in r.stderr, r.stderr
    r = subprocess.run([EXPORTER, f"--web.config.file={web}", f"--registry.dir={tmp_path}/r",
                        "--web.listen-address=127.0.0.1:0"], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 1 and needle in r.stderr


def test_reload_swaps_users_and_keeps_running_on_a_bad_web_config(exporter):
    first = crypt.crypt("one", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 4))
    second = crypt.crypt("two", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 4))
    e = exporter(f"basic_auth_users:\n  p: '{first}'\n")
    url = f"http://127.0.0.1:{e.port}/metrics"
    assert get(url, headers=basic("p", "one"))[0] == 200
    with open(e.web, "w") as f:
        f.write(f"basic_auth_users:\n  p: '{second}'\n")
    e.proc.send_signal(signal.SIGHUP)
    deadline = time.time() + 10
    while time.time() < deadline and get(url, headers=basic("p", "two"))[0] != 200:
        time.sleep(0.05)
    assert get(url, headers=basic("p", "two"))[0] == 200
    assert get(url, headers=basic("p", "one"))[0] == 401
    with open(e.web, "w") as f:
        f.write("basic_auth_users: [broken\n")
    e.proc.send_signal(signal.SIGHUP)
    deadline = time.time() + 10
    while time.time() < deadline and "reload failed" not in open(e.log).read():
        time.sleep(0.05)
    assert "reload failed" in open(e.log).read()
    assert e.proc.poll() is None
    assert get(url, headers=basic("p", "two"))[0] == 200, "the running configuration is kept"


def raw_status(port, data, wait=5):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(wait)
    s.sendall(data)
    out = b""
    try:
        while b"\r\n" not in out:
            chunk = s.recv(4096)
            if not chunk:
                break
            out += chunk
    finally:
        s.close()
    return int(out.split(b" ")[1]) if out.startswith(b"HTTP/") else None


def test_malformed_oversized_and_unknown_requests_get_the_right_status(exporter):
    e = exporter("")
    assert raw_status(e.port, b"GARBAGE\r\n\r\n") == 400
    assert raw_status(e.port, b"GET /metrics HTTP/9.9\r\n\r\n") == 505
    assert raw_status(e.port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 40000 + b"\r\n\r\n") == 431
    assert raw_status(e.port, b"GET /" + b"a" * 40000 + b" HTTP/1.1\r\n\r\n") == 431
    assert raw_status(e.port, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n") == 404
    assert raw_status(e.port, b"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n") == 405
    assert get(f"http://127.0.0.1:{e.port}/metrics")[0] == 200, "still serving"


def test_slow_clients_do_not_stall_other_scrapes(exporter):
    e = exporter("")
    slow = []
    try:
        for _ in range(16):  # each sends half a request and then nothing
            s = socket.create_connection(("127.0.0.1", e.port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)
        time.sleep(0.2)
        start = time.monotonic()
        status, body = get(f"http://127.0.0.1:{e.port}/metrics")
        took = time.monotonic() - start
        assert status == 200 and b"gym_exporter_build_info" in body
        assert took < 5, f"a scrape waited {took:.1f} s behind slow clients"
    finally:
        for s in slow:
            s.close()


def test_configured_headers_are_on_every_reply_and_the_rest_of_the_schema_is_accepted(exporter):
    e = exporter("http_server_config:\n  http2: false\n  headers:\n"
                 "    X-Frame-Options: deny\n    strict-transport-security: max-age=31536000\n")
    assert e.port, open(e.log).read()
    for path, code in (("/metrics", 200), ("/", 200), ("/-/healthy", 200), ("/nope", 404)):
        req = urllib.request.Request(f"http://127.0.0.1:{e.port}{path}")
        try:
            with urllib.request.urlopen(req, timeout=HTTP_S) as r:
                status, headers = r.status, r.headers
        except urllib.error.HTTPError as err:
            status, headers = err.code, err.headers
        assert status == code
        assert headers["X-Frame-Options"] == "deny", path
        assert headers["Strict-Transport-Security"] == "max-age=31536000", path


def handshake(port, pki, maximum=ssl.TLSVersion.TLSv1_2, ciphers=None):
    """(TLS version, suite) a client offering `ciphers` (OpenSSL's names, in
    its order of preference) up to `maximum` gets; None when refused."""
    ctx = tls_context(pki)
    ctx.maximum_version = maximum
    if ciphers:
        ctx.set_ciphers(ciphers)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=HTTP_S) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                return s.version(), s.cipher()[0]
    except (ssl.SSLError, ConnectionError):
        return None


def test_tls_offers_no_cbc_suite_and_its_own_order_wins(exporter, pki):
    """testssl.sh found CBC suites offered (LUCKY13) and no server order."""
    e = exporter(f"tls_server_config:\n  cert_file: {pki}/server.crt\n"
                 f"  key_file: {pki}/server.key\n")
    assert e.port, open(e.log).read()
    assert handshake(e.port, pki, ciphers="ECDHE-RSA-AES128-SHA:AES128-SHA") is None, "CBC"
    assert handshake(e.port, pki, ciphers="AES128-GCM-SHA256") is None, "no forward secrecy"
    # The client prefers ChaCha20; the server's order (AES-GCM first) wins.
    assert handshake(e.port, pki, ciphers="ECDHE-RSA-CHACHA20-POLY1305:ECDHE-RSA-AES128-GCM-SHA256"
                     ) == ("TLSv1.2", "ECDHE-RSA-AES128-GCM-SHA256")
    assert handshake(e.port, pki, maximum=ssl.TLSVersion.TLSv1_3)[0] == "TLSv1.3"


def test_max_version_and_cipher_suites_take_go_names_as_exporter_toolkit_does(exporter, pki):
    e = exporter(f"tls_server_config:\n  cert_file: {pki}/server.crt\n"
                 f"  key_file: {pki}/server.key\n  max_version: TLS12\n"
                 f"  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, TLS_AES_128_GCM_SHA256]\n"
                 f"  prefer_server_cipher_suites: false\n")
    assert e.port, open(e.log).read()
    assert handshake(e.port, pki, maximum=ssl.TLSVersion.TLSv1_3) == (
        "TLSv1.2", "ECDHE-RSA-AES256-GCM-SHA384"), "TLS 1.3 is above max_version"
    assert handshake(e.port, pki, ciphers="ECDHE-RSA-AES128-GCM-SHA256") is None, "not listed"
    assert get(f"https://127.0.0.1:{e.port}/metrics", tls_context(pki))[0] == 200


def test_prefer_server_cipher_suites_is_accepted_with_tls(exporter, pki):
    e = exporter(f"tls_server_config:\n  cert_file: {pki}/server.crt\n"
                 f"  key_file: {pki}/server.key\n  prefer_server_cipher_suites: true\n")
    assert e.port, open(e.log).read()
    assert "tls=true" in open(e.log).read()
    assert get(f"https://127.0.0.1:{e.port}/metrics", tls_context(pki))[0] == 200
