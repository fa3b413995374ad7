"""What an untrusted caller (an agent over MCP) may make a server fetch: a :class:`Guard`.

Two rules, both enforced on what is actually used, never on a name checked earlier:

* **Network.** Loopback, private, link-local, unique-local, site-local, multicast, unspecified,
  reserved and other non-public addresses are refused (IPv4, IPv6, IPv4 inside IPv6 — mapped, 6to4,
  NAT64 —, and any spelling the resolver accepts: ``0x7f000001``, ``2130706433``, ``127.1``), unless
  allowed by host name, IP or CIDR. :meth:`Guard.connect_addresses` resolves the host, checks every
  address and returns the checked ones; :mod:`cairn_servers.core.fetch` connects to exactly those, for every
  connection including each redirect hop. A refused address is never connected to.
* **Files.** A local file is read only when the descriptor actually opened lies inside one of the
  allowed folders: :meth:`Guard.open_file` opens the resolved path once (``O_NOFOLLOW``), then checks
  the real path of the open descriptor, so swapping a file or a folder for a symlink between a
  check and the open cannot redirect the read.

Refusals are :class:`~cairn_servers.core.errors.InvalidInput` and never name a path outside the allowed folders.
Standard library only: this module is imported by CLI paths.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from cairn_servers.core.errors import InvalidInput, NetworkError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052: the last 32 bits are an IPv4 address
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")


def address_kind(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public internet address ("loopback", "private", ...), or None if it is."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            ip = ipaddress.IPv6Address(ip.compressed.split("%")[0])
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            inner = address_kind(embedded)
            if inner:
                return inner
    if ip.is_loopback:
        return "loopback"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return "site-local"
    if isinstance(ip, ipaddress.IPv6Address) and ip in _UNIQUE_LOCAL:
        return "unique-local"
    if ip.is_reserved:
        return "reserved"
    if ip.is_private:
        return "private"
    if not ip.is_global:  # 100.64.0.0/10 (carrier-grade NAT), documentation ranges, ...
        return "non-public"
    return None


@dataclass(frozen=True)
class Guard:
    """The policy for one untrusted caller. ``file_roots``: folders local files may come from (none:
    no local files). ``allow_names`` / ``allow_nets``: hosts allowed even on non-public addresses.
    ``public``: False allows only the listed hosts (no other network at all). ``file_refusal`` is the
    whole message for a refused file (it names no path); ``hosts_env`` names the setting listing the
    allowed hosts and ``hint`` ends every host refusal (another way to get the document)."""

    file_roots: tuple[Path, ...] = ()
    allow_names: frozenset[str] = frozenset()
    allow_nets: tuple[IPNetwork, ...] = ()
    public: bool = True
    file_refusal: str = "Local files cannot be read here: the path is outside the allowed folders."
    hosts_env: str = "the allowed hosts"
    hint: str = ""

    @staticmethod
    def parse_hosts(raw: str, source: str = "the allowed hosts") -> tuple[frozenset[str], tuple[IPNetwork, ...]]:
        """``"docs.local, 127.0.0.1, 10.0.0.0/8, [::1]"`` -> (host names, networks)."""
        names: set[str] = set()
        nets: list[IPNetwork] = []
        for entry in raw.split(","):
            item = entry.strip().lower()
            if not item:
                continue
            bare = item[1:-1] if item.startswith("[") and item.endswith("]") else item
            try:
                nets.append(ipaddress.ip_network(bare, strict=False))
                continue
            except ValueError:
                pass
            name = bare.rstrip(".")
            if not name or "/" in name or not all(c.isalnum() or c in "-._" for c in name):
                raise InvalidInput(f"{source}: {entry.strip()!r} is not a host name, an IP address or a CIDR "
                                   "block (e.g. docs.internal, 127.0.0.1, 10.0.0.0/8).")
            names.add(name)
        return frozenset(names), tuple(nets)

    # -- network -------------------------------------------------------------------------------

    def _allowed_ip(self, ip: IPAddress) -> bool:
        return any(ip.version == net.version and ip in net for net in self.allow_nets)

    def connect_addresses(self, host: str, port: int) -> list[str]:
        """The addresses to connect to for ``host``, every one of them checked; raises InvalidInput
        (before any connection) when the host or one of its addresses is refused."""
        name = host.strip("[]").lower().rstrip(".")
        by_name = name in self.allow_names
        literal = _literal(name)
        if not by_name and not self.public and not self.allow_nets:
            raise self._only_listed(host)
        if literal is not None:
            found = [literal]
        else:
            try:
                infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
            except (socket.gaierror, UnicodeError) as exc:
                raise NetworkError(f"Cannot resolve {host}: {getattr(exc, 'strerror', None) or exc}. "
                                   "Check the URL and your network connection.") from None
            found = []
            for info in infos:
                ip = ipaddress.ip_address(str(info[4][0]).split("%")[0])
                if ip not in found:
                    found.append(ip)
        if not found:
            raise NetworkError(f"Cannot resolve {host}: no addresses. Check the URL.")
        if by_name:
            return [str(ip) for ip in found]
        # An IP written oddly is shown with its usual form; a host name's addresses are never shown
        # (an agent must not map the internal DNS through these errors).
        shown = f"[{name}]" if ":" in name else name
        if literal is not None and not _standard(name):
            shown += f" ({literal})"
        for ip in found:
            if self._allowed_ip(ip):
                continue
            if not self.public:
                raise self._only_listed(shown)
            kind = address_kind(ip)
            if kind:
                what = "is" if literal is not None else "resolves to"
                article = "an" if kind == "unspecified" else "a"
                raise InvalidInput(
                    f"Refused to connect to {shown}: it {what} {article} {kind} address, and only public internet "
                    f"addresses may be fetched here. To allow it, list it in {self.hosts_env} (comma-separated "
                    f"host names, IP addresses or CIDR blocks) where the server starts. {self.hint}".rstrip())
        return [str(ip) for ip in found]

    def _only_listed(self, shown: str) -> InvalidInput:
        return InvalidInput(f"Refused to connect to {shown}: only the hosts listed in {self.hosts_env} may be "
                            f"fetched here. {self.hint}".rstrip())

    # -- files ---------------------------------------------------------------------------------

    def inside(self, path: Path) -> bool:
        return any(path == root or path.is_relative_to(root) for root in self.file_roots)

    def refuse_file(self) -> InvalidInput:
        return InvalidInput(self.file_refusal)

    def open_file(self, path: Path) -> int:
        """A read-only descriptor for ``path``, verified to lie inside ``file_roots`` after opening.

        The path is resolved and checked, opened once without following a final symlink (a resolved
        path has none: one there now was swapped in), and the descriptor's own real path is checked
        again, which also catches a parent folder swapped for a symlink. Only that descriptor is read.
        """
        try:
            real = path.resolve()
        except (OSError, RuntimeError):
            raise self.refuse_file() from None
        if not self.inside(real):
            raise self.refuse_file()
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(real, flags)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):  # a symlink appeared (EMLINK: FreeBSD's O_NOFOLLOW)
                raise self.refuse_file() from None
            raise
        try:
            opened = descriptor_path(fd)
            if opened is not None:
                ok = self.inside(opened)
            else:  # no /proc and no F_GETPATH: the descriptor must be the file the checked path names
                now, was = os.fstat(fd), os.stat(real, follow_symlinks=False)
                ok = (now.st_dev, now.st_ino) == (was.st_dev, was.st_ino) and stat.S_ISREG(was.st_mode)
            if not ok:
                raise self.refuse_file()
        except BaseException:
            os.close(fd)
            raise
        return fd


def _literal(host: str) -> IPAddress | None:
    """``host`` as an IP address when it is written as one in any form the C resolver accepts
    (``127.1``, ``0x7f000001``, ``2130706433``, ``0177.0.0.1``, ``::ffff:127.0.0.1``), else None."""
    try:
        return ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, ValueError, UnicodeError):
        return None


def _standard(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def descriptor_path(fd: int) -> Path | None:
    """The real path of an open descriptor (Linux: /proc/self/fd; macOS: F_GETPATH), or None."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        target = ""
    if target.startswith("/"):
        return Path(target.removesuffix(" (deleted)"))
    try:
        import fcntl

        getpath = getattr(fcntl, "F_GETPATH", None)
        if getpath is not None:
            raw = fcntl.fcntl(fd, getpath, b"\0" * 1024)
            return Path(raw.split(b"\0", 1)[0].decode())
    except (ImportError, OSError, UnicodeDecodeError):
        pass
    return None
