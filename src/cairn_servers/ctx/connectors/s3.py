"""The S3 connector: objects in a bucket (AWS S3, or an S3-compatible server such as MinIO or R2).

Objects are listed with ListObjectsV2 (``page_size`` keys a request) under ``prefix`` and filtered by
the include/exclude globs, which match the whole object key. The fingerprint is the ETag, the
LastModified time and the size, so an unchanged object costs nothing but its line in the listing;
only new and changed objects are downloaded. An object over its cap (``max_document_bytes`` for PDF
and Office files, ``max_file_bytes`` for the rest) is skipped with a warning before a byte is read,
and a body is read at most one byte past its cap (an object that grew since the listing is caught
too). Bodies then take the same path as files (:func:`cairn_servers.ctx.connectors.base.file_item`).

Credentials come from the environment only: the variables named by ``access_key_env`` /
``secret_key_env`` (/ ``session_token_env``), else boto3's own chain (``AWS_ACCESS_KEY_ID`` and
``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE`` and the shared files, an instance role). Their values are
registered as secrets, so no message shows them. A failing bucket (bad credentials, no such bucket,
an endpoint that does not answer within ``timeout``) fails its source with one clear error; an
object that cannot be downloaded for a network reason keeps the version already indexed.

boto3 is imported here, when an S3 source is synced, never on start-up; it is the ``s3`` extra.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from cairn_servers.core.errors import CairnError, ExtensionError, InvalidInput, NetworkError, NotFound, Timeout
from cairn_servers.core.errors import Unauthorized
from cairn_servers.ctx.config import ConnectorConfig
from cairn_servers.ctx.connectors.base import Entry, Item, Matcher, Skips, file_cap, file_item, register, too_big

INSTALL = 'pip install "cairn-servers[s3]"  (or: pip install boto3)'
READ_CHUNK = 1 << 20  # bytes per read of an object's body
_AUTH_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "TokenRefreshRequired",
               "AccessDenied", "AllAccessDisabled", "InvalidClientTokenId", "InvalidSecurity", "Forbidden", "403",
               "401"}
_REGION_CODES = {"AuthorizationHeaderMalformed", "PermanentRedirect", "IllegalLocationConstraintException", "301"}


class S3Connector(Skips):
    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__()
        self.config = config
        o = config.options
        self.bucket: str = o["bucket"]
        self.prefix: str = o["prefix"]
        self.region: str = o["region"]
        self.endpoint: str = o["endpoint_url"]
        self.matcher = Matcher(o["include_globs"], o["exclude_globs"])
        self.max_bytes = int(o["max_file_bytes"])
        self.max_doc_bytes = int(o["max_document_bytes"])
        self.page_size = int(o["page_size"])
        self.timeout = float(o["timeout"])
        self._client: Any = None
        self._down: CairnError | None = None  # the endpoint stopped answering during this sync's downloads

    @property
    def where(self) -> str:
        return f"[connectors.s3.{self.config.name}]"

    @property
    def place(self) -> str:
        """The bucket (and endpoint) as messages name them."""
        return f"bucket {self.bucket!r}" + (f" at {self.endpoint}" if self.endpoint else "")

    # ---- the client ---------------------------------------------------------------------------

    def _credentials(self) -> tuple[str | None, str | None, str | None]:
        """(key id, secret, session token) from the named variables, or Nones for boto3's own chain."""
        from cairn_servers.core.sanitize import register_secret_env

        o = self.config.options
        if not o["access_key_env"]:
            for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
                if os.environ.get(name):
                    register_secret_env(name)
            return None, None, None
        values: list[str | None] = []
        for key in ("access_key_env", "secret_key_env", "session_token_env"):
            name = o[key]
            if not name:
                values.append(None)
                continue
            value = os.environ.get(name, "")
            if not value:
                raise InvalidInput(f"{self.config.source}: ${name} is not set; {self.where} {key} names it as "
                                   "the variable holding the credential. Set it, or fix the config.")
            register_secret_env(name)
            values.append(value)
        return values[0], values[1], values[2]

    def client(self) -> Any:
        if self._client is not None:
            return self._client
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise ExtensionError(f"{self.config.source}: the S3 connector needs boto3, which is not installed. "
                                 f"Install it with: {INSTALL}") from None
        key_id, secret, token = self._credentials()
        session = boto3.session.Session(aws_access_key_id=key_id, aws_secret_access_key=secret,
                                        aws_session_token=token)
        config = Config(connect_timeout=min(self.timeout, 10.0), read_timeout=self.timeout,
                        retries={"total_max_attempts": 2, "mode": "standard"}, user_agent_extra="cairn-ctx")
        self._client = session.client("s3", region_name=self.region or None, endpoint_url=self.endpoint or None,
                                      config=config)
        return self._client

    def error(self, exc: Exception, doing: str) -> CairnError:
        """A botocore failure as one clear error naming the source, the bucket and what to fix."""
        from botocore.exceptions import (ClientError, ConnectTimeoutError, EndpointConnectionError,
                                         NoCredentialsError, PartialCredentialsError, ReadTimeoutError)

        src = self.config.source
        if isinstance(exc, ClientError):
            err = exc.response.get("Error", {})
            code = str(err.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or "")
            if code in ("NoSuchBucket", "404") and doing == "listing":
                return NotFound(f"{src}: {self.place} does not exist. Fix {self.where} bucket "
                                "(and endpoint_url for a server other than AWS).")
            if code in _REGION_CODES:
                return InvalidInput(f"{src}: {self.place} answered {code} while {doing}: it is in another region "
                                    f"than {self.region or 'the default one'}. Fix {self.where} region.")
            if code in _AUTH_CODES:
                return Unauthorized(f"{src}: {self.place} refused the credentials while {doing} ({code}). Check "
                                    f"the access key and secret ({self._credential_source()}) and that they may "
                                    "list and read the bucket.")
            return NetworkError(f"{src}: {self.place} answered {code or 'an error'} while {doing}.")
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            return Unauthorized(f"{src}: no S3 credentials were found. Set AWS_ACCESS_KEY_ID and "
                                f"AWS_SECRET_ACCESS_KEY, or name the variables holding them with {self.where} "
                                "access_key_env and secret_key_env.")
        if isinstance(exc, (ConnectTimeoutError, ReadTimeoutError)):
            return Timeout(f"{src}: {self.place} did not answer within {self.timeout:g} s while {doing}. "
                           f"Check {self.where} endpoint_url and the network, or raise timeout.")
        if isinstance(exc, EndpointConnectionError):
            return NetworkError(f"{src}: cannot reach the S3 endpoint for {self.place} while {doing}. Check "
                                f"{self.where} endpoint_url and region, and that the server is running.")
        return NetworkError(f"{src}: S3 request failed while {doing} in {self.place}: {type(exc).__name__}.")

    def _credential_source(self) -> str:
        o = self.config.options
        if o["access_key_env"]:
            return f"${o['access_key_env']} and ${o['secret_key_env']}"
        return "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or your AWS profile"

    # ---- scan and load -------------------------------------------------------------------------

    def scan(self) -> Iterator[Entry]:
        from botocore.exceptions import BotoCoreError, ClientError

        self.reset()
        self._down = None
        try:
            pages = self.client().get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix, PaginationConfig={"PageSize": self.page_size})
            for page in pages:
                for obj in page.get("Contents", ()):
                    entry = self._entry(obj)
                    if entry is not None:
                        yield entry
        except (BotoCoreError, ClientError) as exc:
            raise self.error(exc, "listing") from None

    def _entry(self, obj: dict[str, Any]) -> Entry | None:
        key = str(obj["Key"])
        if key.endswith("/") or not self.matcher(key):  # a "folder" marker, or left out by the globs
            return None
        size = int(obj.get("Size") or 0)
        cap = file_cap(key, self.max_bytes, self.max_doc_bytes)
        if too_big(self, key, size, cap):
            return None
        etag = str(obj.get("ETag") or "").strip('"')
        modified = obj.get("LastModified")
        stamp = modified.isoformat() if modified is not None else ""
        ts = int(modified.timestamp()) if modified is not None else None
        return Entry(key, f"{etag}:{stamp}:{size}", self._loader(key, ts, cap))

    def _loader(self, key: str, ts: int | None, cap: tuple[int, str]) -> Callable[[], Item | None]:
        def load() -> Item | None:
            data = self._download(key, cap)
            if data is None or too_big(self, key, len(data), cap):
                return None
            return file_item(data, key, self, updated_at=ts, source_url=f"s3://{self.bucket}/{key}")

        return load

    def _download(self, key: str, cap: tuple[int, str]) -> bytes | None:
        """The object's body, read at most one byte past ``cap``; None (told) when it cannot be read."""
        from botocore.exceptions import BotoCoreError, ClientError

        if self._down is not None:  # one unreachable endpoint is not waited for once per object
            raise self._down
        try:
            body = self.client().get_object(Bucket=self.bucket, Key=key)["Body"]
            try:
                data = bytearray()
                while len(data) <= cap[0]:
                    chunk = body.read(min(READ_CHUNK, cap[0] + 1 - len(data)))
                    if not chunk:
                        break
                    data += chunk
            finally:
                body.close()
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code") or "")
            if code in ("NoSuchKey", "404"):  # deleted since the listing: gone, like a vanished file
                return None
            self.warn(key, f"cannot read it ({code or 'error'})")
            return None
        except BotoCoreError as exc:
            self._down = self.error(exc, f"downloading {key}")
            raise self._down from None
        return bytes(data)


register("s3", S3Connector)
