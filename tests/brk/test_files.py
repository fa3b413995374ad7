"""blk file framing: junk before magics, XOR obfuscation, partial records, network detection; bounded reads of
hostile files, growing files, a read-only blocks directory, and finding it where Bitcoin Core keeps it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cairn_servers.brk.blocks.files import (
    MAGICS,
    MAX_BLOCK_BYTES,
    BlockFile,
    detect_network,
    iter_blocks,
    read_xor_key,
    scan,
    unxor,
)
from cairn_servers.brk.blocks.parser import hash_hex, parse_block
from cairn_servers.brk.sample import write_sample
from cairn_servers.core.errors import InvalidInput, NotFound

from ._run import clean_env, run_brk, vec_bytes


def test_junk_before_magic_is_skipped(test_data: Path, tmp_path: Path) -> None:
    src = test_data / "btc" / "hadoopcryptoledger" / "reqseekversion1.blk"
    assert src.read_bytes()[:6] != MAGICS["mainnet"][:6]
    shutil.copy(src, tmp_path / "blk00000.dat")
    found = [parse_block(raw) for _, raw in iter_blocks(tmp_path)]
    assert len(found) == 1
    assert found[0].header.version == 1


def test_xor_obfuscated_files_read_the_same(mainnet_blocks: Path, tmp_path: Path) -> None:
    key = bytes.fromhex("0102030405a6b7c8")
    plain = (mainnet_blocks / "blk00000.dat").read_bytes()
    obf = tmp_path / "obf"
    obf.mkdir()
    (obf / "xor.dat").write_bytes(key)
    (obf / "blk00000.dat").write_bytes(unxor(plain, key, 0))
    assert (obf / "blk00000.dat").read_bytes()[:4] != MAGICS["mainnet"]
    assert read_xor_key(obf) == key
    a = [raw for _, raw in iter_blocks(mainnet_blocks)]
    b = [raw for _, raw in iter_blocks(obf)]
    assert len(a) == 590 and a == b
    assert unxor(unxor(plain[5:100], key, 5), key, 5) == plain[5:100]


def test_bad_xor_key_is_explained(tmp_path: Path) -> None:
    (tmp_path / "xor.dat").write_bytes(b"abc")
    with pytest.raises(InvalidInput, match="holds 3 bytes; Bitcoin Core writes an 8-byte key there"):
        read_xor_key(tmp_path)


@pytest.mark.parametrize("key", [bytes(8), bytes.fromhex("f00dbabe12345678")])
def test_partial_record_resumes_where_it_stopped(mainnet_blocks: Path, tmp_path: Path, key: bytes) -> None:
    data = (mainnet_blocks / "blk00000.dat").read_bytes()
    path = tmp_path / "blk00000.dat"
    path.write_bytes(unxor(data[:1000] + bytes(4096), key, 0))  # cut mid-record, then zero preallocation
    records, resume = scan(path, key, MAGICS["mainnet"])
    assert 0 < resume < 1000
    assert all(r.offset + r.length <= resume for r in records)
    path.write_bytes(unxor(data, key, 0))
    more, resume2 = scan(path, key, MAGICS["mainnet"], resume)
    assert more and all(r.header == data[r.offset:r.offset + 80] for r in more)  # XOR phase kept mid-file
    assert len(records) + len(more) == 590
    assert resume2 == len(data)


def test_network_detection(tmp_path: Path, mainnet_blocks: Path) -> None:
    assert detect_network(mainnet_blocks) == "mainnet"
    regtest = tmp_path / "rt"
    regtest.mkdir()
    raw = (mainnet_blocks / "blk00000.dat").read_bytes()
    (regtest / "blk00000.dat").write_bytes(MAGICS["regtest"] + raw[4:293])
    assert detect_network(regtest) == "regtest"
    assert hash_hex(parse_block(next(iter_blocks(regtest))[1]).hash).startswith("000000000019d668")


def test_missing_dir_is_explained(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="does not exist. Point --blocks-dir at a node's blocks/ folder."):
        detect_network(tmp_path / "nope")
    with pytest.raises(NotFound, match="No block records found"):
        detect_network(tmp_path)


# -- Hardening round 2 (issue 20.6): every read of a node's directory is bounded ---------------------


def _chain(path: Path, blocks: int = 150, max_file_bytes: int = 128 << 20) -> Path:
    write_sample(path, blocks, seed=3, max_file_bytes=max_file_bytes)
    return path


@pytest.mark.parametrize("kind", ["dev_zero", "directory", "fifo", "nine_bytes", "sparse_100mb"])
def test_xor_dat_is_read_bounded(tmp_path: Path, kind: str) -> None:
    blocks = _chain(tmp_path / "blocks", 20)
    xor = blocks / "xor.dat"
    if kind == "dev_zero":
        xor.symlink_to("/dev/zero")
    elif kind == "directory":
        xor.mkdir()
    elif kind == "fifo":
        os.mkfifo(xor)
    elif kind == "nine_bytes":
        xor.write_bytes(bytes(9))
    else:
        with open(xor, "wb") as fh:
            fh.truncate(100 << 20)
    expected = {
        "nine_bytes": f"{xor} holds 9 bytes; Bitcoin Core writes an 8-byte key there.",
        "sparse_100mb": f"{xor} holds {100 << 20} bytes; Bitcoin Core writes an 8-byte key there.",
    }.get(kind, f"{xor} is not a regular file; Bitcoin Core writes an 8-byte key there.")
    with pytest.raises(InvalidInput) as exc:
        read_xor_key(blocks)
    assert exc.value.message == expected
    r = run_brk("index", "--blocks-dir", str(blocks), "--out", str(tmp_path / "out"), env=clean_env(), timeout=30)
    assert (r.code, r.err) == (2, f"brk: error: {expected}\n")
    assert r.peak_mb < 200 and r.seconds < 20  # /dev/zero used to take 14 GB in 7 s


def _sparse_ok(path: Path) -> bool:
    return os.stat(path).st_blocks * 512 < 1 << 20


def test_huge_sparse_blk_files_are_scanned_in_bounded_memory(tmp_path: Path) -> None:
    blocks = _chain(tmp_path / "blocks", 200, max_file_bytes=40_000)
    files = sorted(blocks.glob("blk*.dat"))
    assert len(files) >= 3
    # A 6 GB file: the records, then a sparse tail (a preallocated file that is mostly zeros).
    with open(files[0], "r+b") as fh:
        fh.truncate(6 << 30)
    # Records behind a 3 GB hole, and records in a file followed by 64 MB of real zero bytes.
    data = files[1].read_bytes()
    with open(files[1], "wb") as fh:
        fh.seek(3 << 30)
        fh.write(data)
    with open(files[2], "ab") as fh:
        for _ in range(8):
            fh.write(bytes(8 << 20))
    if not _sparse_ok(files[0]):
        pytest.skip("this filesystem does not keep sparse files sparse")
    r = run_brk("index", "--blocks-dir", str(blocks), "--out", str(tmp_path / "out"), "--no-compute",
                "--format", "json", env=clean_env(), timeout=120)
    assert r.code == 0, r.err
    assert '"height": 199' in r.out and '"invalid": []' in r.out
    assert r.peak_mb < 300, r.peak_mb  # the whole 6 GB file used to be read into memory
    assert "junk" not in r.err  # zeros and holes are not junk


@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "directory", "dangling"])
def test_blk_names_that_are_not_regular_files_are_skipped(tmp_path: Path, kind: str) -> None:
    blocks = _chain(tmp_path / "blocks", 120)
    odd = blocks / "blk00007.dat"
    if kind == "dev_zero":
        odd.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(odd)
    elif kind == "directory":
        odd.mkdir()
    else:
        odd.symlink_to(tmp_path / "missing")
    r = run_brk("index", "--blocks-dir", str(blocks), "--out", str(tmp_path / "out"), "--no-compute",
                "--format", "json", "--progress", "none", env=clean_env(), timeout=60)
    assert r.code == 0, r.err
    assert '"height": 119' in r.out
    assert r.err == f"brk: ignoring blk00007.dat in {blocks}: not a regular file\n"
    assert r.peak_mb < 200


def test_oversized_records_are_refused_with_a_message(tmp_path: Path) -> None:
    blocks = _chain(tmp_path / "blocks", 60)
    path = blocks / "blk00000.dat"
    data = path.read_bytes()
    magic = MAGICS["regtest"]
    # A frame claiming 5 MB between two real records, as a corrupt or hostile file might hold.
    cut = data.index(magic, 1000)
    bogus = magic + (5_000_000).to_bytes(4, "little") + bytes(200)
    path.write_bytes(data[:cut] + bogus + data[cut:])
    notes: list[str] = []
    records, resume = scan(path, bytes(8), magic, log=notes.append)
    assert len(records) == 60 and resume == len(data) + len(bogus)
    assert notes == [f"skipped a record in blk00000.dat at offset {cut} that claims 5000000 bytes, more than a "
                     f"block can hold ({MAX_BLOCK_BYTES})", "skipped 6 junk bytes in blk00000.dat after offset 0"]
    bf = BlockFile(path, bytes(8))
    try:
        with pytest.raises(InvalidInput, match="claims 5000000 bytes, more than a block can hold"):
            bf.read(cut + 8, 5_000_000)
    finally:
        bf.close()


# -- Full-node conventions (issue 13.8) ----------------------------------------------------------------

@pytest.mark.parametrize("key", [bytes(8), bytes.fromhex("f00dbabe12345678")])
def test_a_growing_last_file_is_picked_up_next_run(tmp_path: Path, key: bytes) -> None:
    """bitcoind appends while brk reads: a half-written last record is no error; the next run takes it."""
    full = _chain(tmp_path / "full", 150)
    data = (full / "blk00000.dat").read_bytes()
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    if any(key):
        (blocks / "xor.dat").write_bytes(key)
    path = blocks / "blk00000.dat"
    magic = MAGICS["regtest"]
    frames = [r.offset - 8 for r in scan(full / "blk00000.dat", bytes(8), magic)[0]]
    # Cut mid-frame (magic, no length yet), then inside the coinbase of a later block, then of the last one.
    cuts = [frames[-10] + 4, frames[-5] + 8 + 130, frames[-1] + 8 + 130, len(data)]
    heights = []
    for cut in cuts:
        # Bitcoin Core preallocates: the bytes not yet written are zeros on disk.
        path.write_bytes(unxor(data[:cut], key, 0) + bytes(len(data) + 4096 - cut))
        r = run_brk("index", "--blocks-dir", str(blocks), "--out", str(tmp_path / "out"), "--no-compute",
                    "--format", "json", "--progress", "none", env=clean_env(), timeout=60)
        assert r.code == 0 and r.err == "", r.err
        heights.append(json.loads(r.out)["height"])
    assert heights == [139, 144, 148, 149]
    fresh = run_brk("index", "--blocks-dir", str(full), "--out", str(tmp_path / "fresh"), "--no-compute",
                    "--progress", "none", env=clean_env(), timeout=60)
    assert fresh.code == 0
    resumed, clean = vec_bytes(tmp_path / "out"), vec_bytes(tmp_path / "fresh")
    assert resumed.keys() == clean.keys()
    # Same chain, same rows; the scan cache (blockpos) is the same too since every block was found once.
    assert all(resumed[k] == clean[k] for k in clean), [k for k in clean if resumed[k] != clean[k]]


def _snapshot(root: Path) -> dict[str, tuple[int, int, int, str]]:
    import hashlib

    snap = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        snap[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return snap


def test_the_blocks_directory_is_only_read(tmp_path: Path) -> None:
    blocks = _chain(tmp_path / "blocks", 150, max_file_bytes=30_000)
    (blocks / "xor.dat").write_bytes(bytes(8))
    (blocks / "index").mkdir()  # Bitcoin Core's LevelDB block index sits beside the blk files
    (blocks / "index" / "CURRENT").write_text("MANIFEST-000001\n")
    for p in [*blocks.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    blocks.chmod(0o555)
    out = tmp_path / "out"
    before = _snapshot(blocks)
    target, mounted = blocks, False
    if os.geteuid() == 0:  # root ignores permissions: read through a read-only bind mount instead
        target = tmp_path / "ro"
        target.mkdir()
        mounted = subprocess.run(["mount", "--bind", str(blocks), str(target)], capture_output=True).returncode == 0
        if mounted:
            mounted = subprocess.run(["mount", "-o", "remount,bind,ro", str(target)],
                                     capture_output=True).returncode == 0 or _umount(target)
        if not mounted:
            target = blocks  # no mount allowed here: the snapshot comparison still holds
    try:
        for _ in range(2):
            r = run_brk("index", "--blocks-dir", str(target), "--out", str(out), "--format", "json",
                        env=clean_env(), timeout=120)
            assert r.code == 0, r.err
            assert '"height": 149' in r.out
        assert '"indexed_blocks": 0' in r.out
        assert _snapshot(blocks) == before
    finally:
        if mounted:
            _umount(target)
        for p in [blocks, *blocks.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)


def _umount(path: Path) -> bool:
    subprocess.run(["umount", str(path)], capture_output=True)
    return False


def _fake_home(tmp_path: Path, *dirs: str) -> Path:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    for d in dirs:
        _chain(home / d, 110)
    return home


def test_blocks_dir_discovery_says_where_it_looked(tmp_path: Path) -> None:
    home = _fake_home(tmp_path)
    r = run_brk("index", "--out", str(tmp_path / "out"), env=clean_env(HOME=str(home)), timeout=30)
    assert r.code == 3
    looked = [f"{base}/{sub}blocks" for base in ("~/.bitcoin", "~/Library/Application Support/Bitcoin")
              for sub in ("", "testnet3/", "testnet4/", "signet/", "regtest/")]
    assert r.err == (f"brk: error: No Bitcoin Core blocks directory found. Looked in: {', '.join(looked)}. "
                     f"Pass --blocks-dir DIR (or set BRK_BLOCKS_DIR).\n")  # home shown as ~


@pytest.mark.parametrize(("where", "network"), [
    (".bitcoin/regtest/blocks", "regtest"),
    ("Library/Application Support/Bitcoin/testnet4/blocks", "testnet4"),
    ("appdata/Bitcoin/signet/blocks", "signet"),
    ("localappdata/Bitcoin/blocks", "mainnet"),
])
def test_blocks_dir_discovery_finds_the_usual_places(tmp_path: Path, where: str, network: str) -> None:
    home = _fake_home(tmp_path, where)
    env = clean_env(HOME=str(home), APPDATA=str(home / "appdata"), LOCALAPPDATA=str(home / "localappdata"))
    r = run_brk("index", "--out", str(tmp_path / "out"), "--no-compute", "--format", "json", "--progress", "none",
                env=env, timeout=60)
    assert r.code == 0, r.err
    assert r.err == f"brk: reading {network} blocks from ~/{where}\n"
    assert '"height": 109' in r.out


def test_blocks_dir_discovery_with_several_networks(tmp_path: Path) -> None:
    home = _fake_home(tmp_path, ".bitcoin/signet/blocks", ".bitcoin/regtest/blocks")
    env = clean_env(HOME=str(home))
    r = run_brk("index", "--out", str(tmp_path / "o1"), env=env, timeout=30)
    assert r.code == 2
    assert r.err == ("brk: error: Found blocks of several networks: signet (~/.bitcoin/signet/blocks), regtest "
                     "(~/.bitcoin/regtest/blocks). Choose one with --network.\n")
    r = run_brk("index", "--network", "regtest", "--out", str(tmp_path / "o2"), "--no-compute", "--format", "json",
                "--progress", "none", env=env, timeout=60)
    assert r.code == 0 and '"network": "regtest"' in r.out
    r = run_brk("index", "--network", "testnet4", "--blocks-dir", str(home / ".bitcoin/regtest/blocks"),
                "--out", str(tmp_path / "o3"), env=env, timeout=30)
    assert r.code == 2
    assert r.err == ("brk: error: ~/.bitcoin/regtest/blocks holds regtest blocks, not testnet4. Drop --network or "
                     "point --blocks-dir at the testnet4 blocks.\n")
    r = run_brk("index", "--network", "moon", "--out", str(tmp_path / "o4"), env=env, timeout=30)
    assert (r.code, r.err) == (2, "brk: error: Unknown network 'moon'. Use one of: mainnet, testnet, testnet4, signet, "
                                  "regtest.\n")


# -- Hostile files, round 3 -------------------------------------------------------------------------

STRESS = os.environ.get("CAIRN_STRESS", "") not in ("", "0")


def test_xor_dat_linked_to_proc_self_mem_is_refused_before_reading(tmp_path: Path) -> None:
    """/proc/self/mem is a "regular" file of size 0 whose read fails with EIO (was a traceback)."""
    blocks = _chain(tmp_path / "blocks", 20)
    xor = blocks / "xor.dat"
    xor.symlink_to("/proc/self/mem")
    expected = f"{xor} holds 0 bytes; Bitcoin Core writes an 8-byte key there."
    with pytest.raises(InvalidInput) as exc:
        read_xor_key(blocks)
    assert exc.value.message == expected
    r = run_brk("index", "--blocks-dir", str(blocks), "--out", str(tmp_path / "out"), env=clean_env(), timeout=30)
    assert (r.code, r.err) == (2, f"brk: error: {expected}\n")


def _junk_file(path: Path, records: int, seed: int) -> None:
    """``records`` framed records of 81 random bytes (mainnet magic): each looks like a tiny block."""
    import random

    rng = random.Random(seed)
    frame = MAGICS["mainnet"] + (81).to_bytes(4, "little")
    with open(path, "wb") as fh:
        for _ in range(records // 10_000):
            fh.write(b"".join(frame + rng.randbytes(81) for _ in range(10_000)))


def test_a_million_junk_records_per_file_cost_a_few_lines_and_bounded_memory(mainnet_blocks: Path,
                                                                            tmp_path: Path) -> None:
    """Three blk files of tiny junk records (89 MB each under CAIRN_STRESS=1, 8.9 MB otherwise) used
    to cost a stderr line per record (476 MB) and memory growing with the files (498 MB): now a few
    examples and a count per file, and the same peak memory whatever the files' size."""
    per_file = 1_000_000 if STRESS else 100_000
    for n in (1, 2, 3):
        _junk_file(mainnet_blocks / f"blk{n:05d}.dat", per_file, n)
    r = run_brk("index", "--blocks-dir", str(mainnet_blocks), "--out", str(tmp_path / "out"), "--no-compute",
                "--format", "json", "--progress", "none", env=clean_env(), timeout=600 if STRESS else 180)
    assert r.code == 0, r.err[-2000:]
    result = json.loads(r.out)
    assert (result["height"], result["indexed_blocks"], result["invalid"]) == (589, 590, [])
    lines = r.err.splitlines()
    assert len(lines) == 3 * 4, r.err[:3000]
    for n in (1, 2, 3):
        summary = [line for line in lines if line.startswith(f"brk: ignored ") and f"blk{n:05d}.dat" in line]
        assert len(summary) == 1, lines
        ignored = int(summary[0].split()[2])
        assert per_file * 0.99 < ignored < per_file, summary  # a few random headers meet their own target
    print(f"{3 * per_file:,} junk records: peak RSS {r.peak_mb:.0f} MB, {len(r.err):,} bytes of stderr, "
          f"{r.seconds:.1f} s")
    assert r.peak_mb < 80, r.peak_mb  # 87 MB for 300,000 records before, 498 MB for 3,000,000


def test_many_oversized_frames_give_a_count_not_a_line_each(tmp_path: Path) -> None:
    blocks = _chain(tmp_path / "blocks", 30)
    path = blocks / "blk00000.dat"
    data = path.read_bytes()
    magic = MAGICS["regtest"]
    bogus = (magic + (5_000_000).to_bytes(4, "little") + bytes(8)) * 20_000
    path.write_bytes(bogus + data)
    notes: list[str] = []
    records, resume = scan(path, bytes(8), magic, log=notes.append)
    assert len(records) == 30 and resume == len(bogus) + len(data)
    frame = len(bogus) // 20_000
    assert notes == [f"skipped a record in blk00000.dat at offset {i * frame} that claims 5000000 bytes, more than "
                     f"a block can hold ({MAX_BLOCK_BYTES})" for i in range(3)] + [
        "skipped 20000 records in blk00000.dat after offset 0 that claim more than a block can hold (the first 3 "
        "shown above)", "skipped 120000 junk bytes in blk00000.dat after offset 0"]
