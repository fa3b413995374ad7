"""The S3 connector against a real S3 server: moto's, started on 127.0.0.1 on a free port with signature
checking on (an IAM user with an access key; any other key is refused), driven through boto3."""

from __future__ import annotations

import http.client
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn_servers.core import sanitize
from cairn_servers.core.errors import InvalidInput
from cairn_servers.ctx import config as cfg
from cairn_servers.ctx.service import Service

from ._docs import pdf_bytes
from .conftest import config_file, free_port, write

BUCKET = "team-docs"
KEY_ENV, SECRET_ENV = "CTX_TEST_S3_KEY", "CTX_TEST_S3_SECRET"


class S3:
    """The running server: its URL, the valid key pair, and a boto3 client signed with it."""

    def __init__(self, url: str, key_id: str, secret: str) -> None:
        import boto3

        self.url, self.key_id, self.secret = url, key_id, secret
        self.client: Any = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                                        aws_access_key_id=key_id, aws_secret_access_key=secret)

    def put(self, bucket: str, objects: dict[str, str | bytes]) -> None:
        for key, body in objects.items():
            self.client.put_object(Bucket=bucket, Key=key, Body=body.encode() if isinstance(body, str) else body)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    import boto3
    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.moto_api._internal.models import moto_api_backend
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    iam = boto3.client("iam", endpoint_url=url, region_name="us-east-1", aws_access_key_id="setup",
                       aws_secret_access_key="setup")
    user = f"ctx-{port}"  # moto's state lives as long as the process: a second start must not clash
    iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName="s3", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    key = iam.create_access_key(UserName=user)["AccessKey"]
    saved = settings.INITIAL_NO_AUTH_ACTION_COUNT
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0  # from here on every request is authenticated
    ActionAuthenticatorMixin.request_count = 0
    try:
        yield S3(url, key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT = saved
        server.stop()
        moto_api_backend.reset()  # the buckets, objects and users it kept in this process's memory


@pytest.fixture
def bucket(s3: S3, request: pytest.FixtureRequest) -> Iterator[str]:
    """An empty bucket of its own for each test."""
    name = f"{BUCKET}-{abs(hash(request.node.name)) % 10**8}"
    s3.client.create_bucket(Bucket=name)
    yield name
    for page in s3.client.get_paginator("list_objects_v2").paginate(Bucket=name):
        for obj in page.get("Contents", ()):
            s3.client.delete_object(Bucket=name, Key=obj["Key"])
    s3.client.delete_bucket(Bucket=name)


@pytest.fixture(autouse=True)
def _env(s3: S3, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The valid key pair in two named variables; nothing else of AWS's from this machine."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
                 "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", sanitize.SECRET_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv(KEY_ENV, s3.key_id)
    monkeypatch.setenv(SECRET_ENV, s3.secret)
    sanitize.clear_secrets()
    yield
    sanitize.clear_secrets()


def service(tmp_path: Path, s3_url: str, bucket: str, extra: str = "", timeout: float = 5) -> Service:
    return Service.from_config(config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[connectors.s3.kb]
bucket = "{bucket}"
endpoint_url = "{s3_url}"
region = "us-east-1"
access_key_env = "{KEY_ENV}"
secret_key_env = "{SECRET_ENV}"
timeout = {timeout}
{extra}
"""))


def ids(svc: Service) -> set[str]:
    return {sid for (sid,) in svc.store.sql("SELECT source_id FROM documents")}


class _Proxy(http.server.ThreadingHTTPServer):
    """An HTTP proxy in front of the S3 server that counts the listings and downloads it passes on and,
    once ``drop_downloads`` is set, hangs up on every download: an endpoint failing in the middle of a sync."""

    daemon_threads = True
    drop_downloads = False
    lists = downloads = 0
    upstream: tuple[str, int] = ("127.0.0.1", 0)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Proxy

    def do_GET(self) -> None:
        listing = "list-type=" in self.path
        if self.server.drop_downloads and not listing:
            self.close_connection = True
            return
        if listing:
            self.server.lists += 1
        else:
            self.server.downloads += 1
        conn = http.client.HTTPConnection(*self.server.upstream, timeout=10)
        conn.request("GET", self.path, headers=dict(self.headers))  # the Host header as signed
        resp = conn.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for name, value in resp.getheaders():
            if name.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        conn.close()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def proxy(s3: S3) -> Iterator[_Proxy]:
    server = _Proxy(("127.0.0.1", 0), _Forward)
    host, port = s3.url.removeprefix("http://").split(":")
    server.upstream = (host, int(port))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_sync_is_incremental_follows_deletions_and_pages(tmp_path: Path, s3: S3, bucket: str,
                                                         proxy: _Proxy) -> None:
    s3.put(bucket, {
        "docs/guide.md": "# Guide\n\nThe heron migrates north in spring.\n",
        "docs/notes.txt": "Meeting notes: the kestrel hovers.\n",
        "docs/report.pdf": pdf_bytes([["Quarterly report", "Revenue of the osprey unit grew."]]),
        "docs/sub/deep.md": "# Deep\n\nA nested key with a cormorant.\n",
        "docs/big.txt": "x" * 5000,  # over max_file_bytes: skipped with a warning, never downloaded
        "docs/app.py": "print('not included by the default globs')\n",
        "docs/folder/": "",  # a folder marker
    })
    svc = service(tmp_path, proxy.url, bucket, "page_size = 2\nmax_file_bytes = 4000")
    first = svc.sync("s3").sources[0]
    assert first.ok, first.error
    assert (first.scanned, first.added, first.unchanged) == (4, 4, 0)
    assert (proxy.lists, proxy.downloads) == (4, 4)  # 7 keys listed 2 a page; big.txt was never downloaded
    assert ids(svc) == {"docs/guide.md", "docs/notes.txt", "docs/report.pdf", "docs/sub/deep.md"}
    assert any(w.startswith("docs/big.txt: skipped:") and "max_file_bytes" in w for w in first.warnings)
    hit = svc.search("osprey")[0]
    assert hit.source_id == "docs/report.pdf" and hit.source == "s3:kb"  # the PDF went through extraction
    assert svc.get(hit.id).source_url == f"s3://{bucket}/docs/report.pdf"

    again = svc.sync("s3").sources[0]  # nothing changed: nothing downloaded or re-extracted
    assert (again.scanned, again.unchanged, again.added, again.updated, again.deleted) == (4, 4, 0, 0, 0)
    assert (proxy.lists, proxy.downloads) == (8, 4)

    s3.put(bucket, {"docs/notes.txt": "Meeting notes: the kestrel hovers over the dunes.\n"})
    changed = svc.sync("s3").sources[0]
    assert (changed.unchanged, changed.updated, changed.added, changed.deleted) == (3, 1, 0, 0)
    assert proxy.downloads == 5  # only the changed object
    assert svc.search("dunes")[0].source_id == "docs/notes.txt"

    s3.client.delete_object(Bucket=bucket, Key="docs/guide.md")
    gone = svc.sync("s3").sources[0]
    assert (gone.scanned, gone.deleted, gone.unchanged) == (3, 1, 3)
    assert "docs/guide.md" not in ids(svc) and not svc.search("heron")


def test_an_endpoint_failing_during_downloads_keeps_what_is_indexed(tmp_path: Path, s3: S3, bucket: str,
                                                                     proxy: _Proxy) -> None:
    s3.put(bucket, {"a.md": "# A\n\nalbatross", "b.md": "# B\n\nbittern"})
    svc = service(tmp_path, proxy.url, bucket)
    assert svc.sync("s3").sources[0].added == 2
    s3.put(bucket, {"b.md": "# B\n\nbittern and bluethroat", "c.md": "# C\n\ncurlew"})
    proxy.drop_downloads = True
    report = svc.sync("s3").sources[0]
    assert (report.scanned, report.unchanged, report.updated, report.added, report.deleted) == (3, 1, 0, 0, 0)
    assert "while downloading b.md" in (report.error or "")  # told once: c.md was not waited for
    assert ids(svc) == {"a.md", "b.md"} and svc.search("bittern") and not svc.search("bluethroat")
    proxy.drop_downloads = False
    report = svc.sync("s3").sources[0]
    assert (report.unchanged, report.updated, report.added, report.error) == (1, 1, 1, None)
    assert svc.search("bluethroat")[0].source_id == "b.md"


def test_prefix_and_globs_choose_the_keys(tmp_path: Path, s3: S3, bucket: str) -> None:
    s3.put(bucket, {"public/a.md": "# A\n\nalpha", "public/drafts/b.md": "# B\n\nbeta", "private/c.md": "# C\n\ngamma"})
    svc = service(tmp_path, s3.url, bucket, 'prefix = "public/"\nexclude_globs = ["public/drafts/**"]')
    report = svc.sync("kb").sources[0]
    assert report.ok, report.error
    assert ids(svc) == {"public/a.md"}


def test_standard_aws_variables_are_used_without_named_ones(tmp_path: Path, s3: S3, bucket: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    s3.put(bucket, {"a.md": "# A\n\nalpha"})
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.secret)
    path = config_file(tmp_path, f'[db]\npath = "kb.sqlite"\n[connectors.s3.kb]\nbucket = "{bucket}"\n'
                                 f'endpoint_url = "{s3.url}"\n')
    report = Service.from_config(path).sync("kb").sources[0]
    assert report.ok and report.added == 1, report.error


def test_bad_credentials_fail_that_source_only_and_no_secret_is_shown(tmp_path: Path, s3: S3, bucket: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    s3.put(bucket, {"a.md": "# A\n\nalpha"})
    write(tmp_path / "local", {"b.md": "# B\n\nbeta"})
    wrong = "wrongSecret/" + s3.secret[:20]
    path = config_file(tmp_path, f"""
[db]
path = "kb.sqlite"
[connectors.s3.kb]
bucket = "{bucket}"
endpoint_url = "{s3.url}"
access_key_env = "{KEY_ENV}"
secret_key_env = "{SECRET_ENV}"
[connectors.filesystem.local]
root = "{tmp_path / 'local'}"
""")
    env = {k: v for k, v in os.environ.items() if k != "CTX_DATABASE_URL"}
    env[SECRET_ENV] = wrong
    r = subprocess.run([sys.executable, "-m", "cairn_servers.ctx.cli", "sync", "--config", str(path), "--json"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 10, r.stderr  # unauthorized
    summary = json.loads(r.stdout)
    by = {s["source"]: s for s in summary["sources"]}
    assert by["filesystem:local"]["ok"] and by["filesystem:local"]["added"] == 1  # the other source synced
    bad = by["s3:kb"]
    assert not bad["ok"] and bad["error_code"] == "unauthorized"
    assert "refused the credentials" in bad["error"] and "SignatureDoesNotMatch" in bad["error"]
    assert f"${KEY_ENV}" in bad["error"]  # it names the variables to check, never their values
    for secret in (wrong, s3.secret, s3.key_id):
        assert secret not in r.stdout and secret not in r.stderr

    # An unknown key id is refused the same way.
    monkeypatch.setenv(KEY_ENV, "AKIANOSUCHKEY0000000")
    report = Service.from_config(path).sync("s3").sources[0]
    assert not report.ok and report.error_code == "unauthorized" and "InvalidAccessKeyId" in (report.error or "")


def test_missing_bucket_and_unreachable_endpoint_are_clear_errors(tmp_path: Path, s3: S3) -> None:
    svc = service(tmp_path, s3.url, "no-such-bucket")
    report = svc.sync("s3").sources[0]
    assert not report.ok and report.error_code == "not_found"
    assert report.error == (f"s3:kb: bucket 'no-such-bucket' at {s3.url} does not exist. Fix [connectors.s3.kb] "
                            "bucket (and endpoint_url for a server other than AWS).")

    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    report = service(tmp_path, closed, "team-docs").sync("s3").sources[0]
    assert not report.ok and report.error_code == "network"
    assert "cannot reach the S3 endpoint" in (report.error or "") and "endpoint_url" in (report.error or "")

    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        report = service(tmp_path, url, "team-docs", timeout=0.3).sync("s3").sources[0]
    assert not report.ok and report.error_code == "timeout"
    assert "did not answer within 0.3 s" in (report.error or "")


def test_a_named_variable_that_is_not_set_is_a_clear_error(tmp_path: Path, s3: S3, bucket: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SECRET_ENV)
    report = service(tmp_path, s3.url, bucket).sync("s3").sources[0]
    assert not report.ok and report.error_code == "bad_request"
    assert report.error == (f"s3:kb: ${SECRET_ENV} is not set; [connectors.s3.kb] secret_key_env names it as the "
                            "variable holding the credential. Set it, or fix the config.")


@pytest.mark.parametrize(("body", "key", "reason"), [
    ('bucket = "b-1"\naws_secret_access_key = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"', "aws_secret_access_key",
     "credentials are never read from the config file"),
    ('bucket = "b-1"\nsecret_key = "abc"', "secret_key", "credentials are never read from the config file"),
    ('bucket = "B_1"', "bucket", "is not a valid bucket name"),
    ("prefix = \"x/\"", "bucket", "is required"),
    ('bucket = "b-1"\nendpoint_url = "ftp://host"', "endpoint_url", "must be an http:// or https:// URL"),
    ('bucket = "b-1"\naccess_key_env = "K"', "secret_key_env", "access_key_env and secret_key_env are set together"),
    ('bucket = "b-1"\naccess_key_env = "K"\nsecret_key_env = "wJalrXUtnFEMI/K7MDENG"', "secret_key_env",
     "must be the NAME of an environment variable"),
    ('bucket = "b-1"\npage_size = 5000', "page_size", "must be between 1 and 1000"),
    ('bucket = "b-1"\nroot = "x"', "root", "unknown key"),
])
def test_config_errors_name_the_key(tmp_path: Path, body: str, key: str, reason: str) -> None:
    path = config_file(tmp_path, f"[connectors.s3.kb]\n{body}\n")
    with pytest.raises(InvalidInput) as exc:
        cfg.load(path)
    assert f"[connectors.s3.kb] {key}: {reason}" in exc.value.message
    assert "wJalrXUtnFEMI" not in exc.value.message  # a pasted key is never echoed


def test_config_show_and_start_up_never_touch_boto3(tmp_path: Path) -> None:
    path = config_file(tmp_path, '[connectors.s3.kb]\nbucket = "b-1"\naccess_key_env = "K"\nsecret_key_env = "S"\n')
    shown = cfg.effective(cfg.load(path))["connectors"]["s3"]["kb"]
    assert shown["access_key_env"] == "K" and shown["secret_key_env"] == "S"  # names, not values: shown
    code = ("import sys; from cairn_servers.ctx.cli import main\n"
            "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
            "from cairn_servers.ctx import config, connectors, sync; config.load(sys.argv[1])\n"
            "print([m for m in ('boto3', 'botocore') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_without_boto3_the_source_fails_with_the_install_command(tmp_path: Path, s3: S3, bucket: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)  # `import boto3` raises ImportError, as when not installed
    report = service(tmp_path, s3.url, bucket).sync("s3").sources[0]
    assert not report.ok and report.error_code == "extension"
    assert report.error == ('s3:kb: the S3 connector needs boto3, which is not installed. Install it with: '
                            'pip install "cairn-servers[s3]"  (or: pip install boto3)')


def test_a_body_is_read_at_most_one_byte_past_its_cap(tmp_path: Path, s3: S3, bucket: str) -> None:
    """An object that grew after the listing (its listed size was under the cap) is cut at cap + 1 bytes
    and skipped with the cap's warning: a body is never read whole into memory."""
    from cairn_servers.ctx.connectors.s3 import S3Connector

    s3.put(bucket, {"grown.txt": "y" * 300_000})
    connector = S3Connector(service(tmp_path, s3.url, bucket).config.connectors[0])
    assert len(connector._download("grown.txt", (1000, "max_file_bytes")) or b"") == 1001
    assert connector._loader("grown.txt", None, (1000, "max_file_bytes"))() is None
    assert connector.warnings == ["grown.txt: skipped: 1,001 bytes is over the 1,000 bytes cap (max_file_bytes)"]
