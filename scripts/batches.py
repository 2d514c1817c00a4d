#!/usr/bin/env python3
"""Reads a convoy dataset folder (dataset.json + batch files, formats v1 and v2) with numpy alone.

For users who load convoy's batch files into NumPy or PyTorch without compiled code:

    import batches
    ds = batches.Dataset("data/fmnist-train")
    for bf in ds.files():                    # one BatchFile per batch file, in dataset order
        x, y = bf.images, bf.labels          # x: uint8 (n, H, W, C), memory-mapped; y: int32 (n,)
    images, labels, ids = ds.arrays()        # everything concatenated (raw encoding)

Checksums: the header's CRC32C is always checked; with verify=True (the default) every section's
CRC32C is too, using the crc32c module when installed (Debian: python3-crc32c) and a table otherwise.
JPEG-encoded datasets give each sample's encoded bytes (bf.jpeg(i)); decode them with PIL.
Whole-image datasets (format v2, datagen --resize short:S) hold each sample at its own size:
bf.dims is (n, 2) height, width; bf.image(i) gives raw sample i as (h, w, C) and arrays() refuses
them (no one array holds images of several sizes).
"""
import json
import os
import struct
import sys

import numpy as np

HEADER = struct.Struct("<8sIIIIIIII6Q4IQI8sI")
assert HEADER.size == 128
MAGIC = b"CVYBATCH"
ALIGN = 64


class BatchFileError(Exception):
    """A batch file or dataset.json that is not sound; the message names the file."""


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = None


def crc32c(data, crc=0):
    """CRC32C (Castagnoli) of bytes-like data, the checksum of convoy's batch files."""
    try:
        import crc32c as fast  # Debian python3-crc32c
        return fast.crc32c(bytes(data), crc) if hasattr(fast, "crc32c") else fast.crc32(bytes(data), crc)
    except ImportError:
        pass
    global _TABLE
    if _TABLE is None:
        _TABLE = _crc32c_table()
    t = _TABLE
    c = crc ^ 0xFFFFFFFF
    for b in bytes(data):
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _align(x):
    return (x + ALIGN - 1) // ALIGN * ALIGN


class BatchFile:
    """One batch file, memory-mapped; arrays are read-only views into the file."""

    def __init__(self, path, verify=True):
        self.path = path
        size = os.path.getsize(path)
        if size < HEADER.size:
            raise BatchFileError(f"{path}: truncated: {size} bytes, shorter than the 128-byte header")
        self._map = np.memmap(path, dtype=np.uint8, mode="r")
        raw = bytes(self._map[: HEADER.size])
        f = HEADER.unpack(raw)
        (magic, version, header_bytes, self.count, self.height, self.width, self.channels,
         encoding, self.batch_index, labels_off, ids_off, index_off, images_off, images_bytes,
         file_bytes, labels_crc, ids_crc, index_crc, images_crc, dims_off, dims_crc, reserved, header_crc) = f
        if magic != MAGIC:
            raise BatchFileError(f"{path}: not a convoy batch file (bad magic)")
        if crc32c(raw[:124]) != header_crc:
            raise BatchFileError(f"{path}: header checksum mismatch (file is corrupt)")
        if version not in (1, 2):
            raise BatchFileError(f"{path}: batch-file version {version} is not supported (this reader reads 1 and 2)")
        if encoding not in (0, 1):
            raise BatchFileError(f"{path}: unknown encoding {encoding}")
        v2 = version == 2
        if any(reserved) or (not v2 and (dims_off or dims_crc)):
            raise BatchFileError(f"{path}: non-zero reserved header bytes (file is corrupt or of a newer version)")
        self.version = version
        self.encoding = "jpeg" if encoding == 1 else "raw"
        n = self.count
        expect_dims = _align(ids_off + 8 * n) if v2 else 0
        expect_index = _align(dims_off + 8 * n) if v2 else _align(ids_off + 8 * n)
        indexed = v2 or encoding == 1
        expect_images = _align(index_off + (n + 1) * 8) if indexed else index_off
        if (header_bytes != 128 or labels_off != _align(128) or ids_off != _align(labels_off + 4 * n)
                or dims_off != expect_dims or index_off != expect_index or images_off != expect_images
                or file_bytes != images_off + images_bytes
                or (v2 and (self.height, self.width) != (0, 0))
                or (not indexed and images_bytes != n * self.height * self.width * self.channels)):
            raise BatchFileError(f"{path}: inconsistent section layout in header")
        if size != file_bytes:
            raise BatchFileError(f"{path}: truncated: {size} bytes, header says {file_bytes}"
                                 if size < file_bytes else
                                 f"{path}: trailing bytes: {size} bytes, header says {file_bytes}")
        ids_end = dims_off if v2 else index_off
        if verify:
            for name, begin, end, crc in (("labels", labels_off, ids_off, labels_crc),
                                          ("ids", ids_off, ids_end, ids_crc),
                                          ("dims", ids_end, index_off if v2 else ids_end, dims_crc),
                                          ("index", index_off, images_off, index_crc),
                                          ("images", images_off, file_bytes, images_crc)):
                if crc32c(self._map[begin:end]) != crc:
                    raise BatchFileError(f"{path}: checksum mismatch in the {name} section (file is corrupt)")
        self.header_crc = header_crc
        self.labels = self._map[labels_off: labels_off + 4 * n].view("<i4")
        self.ids = self._map[ids_off: ids_off + 8 * n].view("<i8")
        self._images = self._map[images_off: file_bytes]
        self.offsets = self._map[index_off: index_off + 8 * (n + 1)].view("<u8") if indexed else None
        self.dims = self._map[dims_off: dims_off + 8 * n].view("<u4").reshape(n, 2) if v2 else None
        if indexed:
            self._check_index(images_bytes)

    def _check_index(self, images_bytes):
        o = self.offsets.astype(np.int64)
        if o[0] != 0 or o[-1] != images_bytes:
            raise BatchFileError(f"{self.path}: offset index does not span the images section")
        if np.any(np.diff(o) < 0):
            raise BatchFileError(f"{self.path}: offset index is not increasing")
        if self.dims is not None:
            if np.any(self.dims == 0):
                raise BatchFileError(f"{self.path}: a sample has a zero height or width")
            want = self.dims[:, 0].astype(np.int64) * self.dims[:, 1] * self.channels
            if self.encoding == "raw" and np.any(np.diff(o) != want):
                i = int(np.argmax(np.diff(o) != want))
                raise BatchFileError(f"{self.path}: sample {i}'s bytes do not match its size {tuple(self.dims[i])}")

    def image(self, i):
        """Raw sample i as uint8 (h, w, C): the file's shape (v1) or the sample's own (v2)."""
        if self.encoding != "raw":
            raise BatchFileError(f"{self.path}: JPEG-encoded; use jpeg(i) for each sample's bytes")
        if self.dims is None:
            return self.images[i]
        h, w = (int(v) for v in self.dims[i])
        return self._images[int(self.offsets[i]): int(self.offsets[i + 1])].reshape(h, w, self.channels)

    @property
    def images(self):
        """uint8 array (n, H, W, C) for raw files of one shape; JPEG and v2 files have no such array."""
        if self.encoding != "raw":
            raise BatchFileError(f"{self.path}: JPEG-encoded; use jpeg(i) for each sample's bytes")
        if self.dims is not None:
            raise BatchFileError(f"{self.path}: images of varied sizes (format v2); use image(i) for each sample")
        return self._images.reshape(self.count, self.height, self.width, self.channels)

    def jpeg(self, i):
        """The encoded bytes of sample i of a JPEG-encoded file."""
        return bytes(self._images[int(self.offsets[i]): int(self.offsets[i + 1])])


class Dataset:
    """A dataset folder: dataset.json and the batch files it lists."""

    def __init__(self, folder, verify=True):
        self.folder = folder
        self.verify = verify
        path = os.path.join(folder, "dataset.json")
        try:
            with open(path) as f:
                self.meta = json.load(f)
        except FileNotFoundError:
            raise BatchFileError(f"{folder}: no dataset.json (not a dataset folder, or datagen did not finish)")
        except json.JSONDecodeError as e:
            raise BatchFileError(f"{path}: not valid JSON: {e}")
        if self.meta.get("format") != "convoy-dataset":
            raise BatchFileError(f"{path}: not a convoy dataset.json")
        self.classes = self.meta["classes"]
        self.mean = np.array(self.meta["mean"], dtype=np.float64)
        self.std = np.array(self.meta["std"], dtype=np.float64)
        img = self.meta["image"]
        self.varied = self.meta.get("format_version") == 2
        # Whole images at their own sizes: no height or width for the dataset (None).
        self.shape = (None, None, img["channels"]) if self.varied else (img["height"], img["width"], img["channels"])

    def __len__(self):
        return self.meta["num_samples"]

    def files(self):
        for entry in self.meta["files"]:
            bf = BatchFile(os.path.join(self.folder, entry["name"]), verify=self.verify)
            if bf.header_crc != entry["crc32c"] or bf.count != entry["count"]:
                raise BatchFileError(f"{bf.path}: does not match its entry in dataset.json")
            yield bf

    def arrays(self):
        """(images uint8 (N, H, W, C), labels int32 (N,), ids int64 (N,)) in dataset order."""
        if self.varied:
            raise BatchFileError(f"{self.folder}: images of varied sizes (format v2) fill no one array; "
                                 "use files() and each file's image(i)")
        parts = list(self.files())
        if not parts:
            h, w, c = self.shape
            return np.zeros((0, h, w, c), np.uint8), np.zeros(0, np.int32), np.zeros(0, np.int64)
        return (np.concatenate([p.images for p in parts]), np.concatenate([p.labels for p in parts]),
                np.concatenate([p.ids for p in parts]))


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="Read a convoy dataset folder with numpy.")
    ap.add_argument("folder")
    ap.add_argument("--dump", metavar="FILE",
                    help="write labels (int32), ids (int64) and images (uint8) of every file, in order, as raw bytes")
    ap.add_argument("--no-verify", action="store_true", help="check header checksums only")
    args = ap.parse_args(argv)
    try:
        ds = Dataset(args.folder, verify=not args.no_verify)
        out = open(args.dump, "wb") if args.dump else None
        n = 0
        for bf in ds.files():
            n += bf.count
            if out:
                out.write(bf.labels.tobytes())
                out.write(bf.ids.tobytes())
                out.write(bf._images.tobytes())
        if out:
            out.close()
        print(f"{args.folder}: {n} samples, {len(ds.classes)} classes, image {ds.shape}, "
              f"mean {np.round(ds.mean, 3).tolist()}, std {np.round(ds.std, 3).tolist()}")
    except BatchFileError as e:
        print(f"batches.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
