# The convoy module's loader: the API, zero-copy hand-over, the same batches as `train` (through
# bench-loader's digest and pixels rebuilt with scripts/batches.py), sharding, and damaged files.
import os
import pathlib
import re
import shutil

import numpy as np
import pytest

import batches
import convoy
from conftest import TRAIN, run_tool, synth


def epoch_digest(loader):
    """bench-loader --digest's CRC32C of one epoch (mirrored raw batches: flips all 0, no floats)."""
    crc = 0
    for images, labels, ids in loader:
        for part in (labels.astype("<i4"), ids.astype("<u8"), images, np.zeros(len(labels), np.uint8)):
            crc = batches.crc32c(np.ascontiguousarray(part).tobytes(), crc)
    return crc


def bench_digests(data, epochs, **flags):
    args = [TRAIN, "bench-loader", "--data", data, "--mode", "raw", "--mirror", "--digest", "--epochs", epochs]
    for k, v in flags.items():
        args += ["--" + k.replace("_", "-")] + ([] if v is True else [v])
    out = run_tool(*args)
    return [int(d, 16) for d in re.findall(r"raw epoch \d+: digest ([0-9a-f]{8})", out)]


def stored(data):
    """Every stored sample by dataset id: (images, labels), decoded with batches.py (raw datasets)."""
    images, labels, ids = batches.Dataset(data).arrays()
    order = np.argsort(ids)
    assert (ids[order] == np.arange(len(ids))).all()
    return images[order], labels[order]


# Loader keyword arguments and the bench-loader flags that ask for the same batches.
CASES = [
    ("raw", dict(batch_size=16, seed=3, crop=8, pad=2, flip=True), dict(batch=16, seed=3, crop=8, pad=2)),
    ("raw", dict(batch_size=10, seed=7, flip=False, rank=1, world_size=2),
     dict(batch=10, seed=7, no_flip=True, rank=1, ranks=2)),
    ("jpeg", dict(batch_size=12, seed=5, crop=24, pad=4, flip=True, readers=1),
     dict(batch=12, seed=5, crop=24, pad=4, readers=3)),
    ("jpeg", dict(batch_size=20, seed=9, crop=16, random_resized_crop=True, flip=True, rank=2, world_size=3),
     dict(batch=20, seed=9, crop=16, random_resized_crop=True, rank=2, ranks=3)),
    ("jpeg", dict(batch_size=32, train=False, drop_last=False, crop=20, eval_resize=24, rank=0, world_size=2),
     dict(batch=32, eval=True, crop=20, eval_resize=24, rank=0, ranks=2)),
    ("raw", dict(batch_size=25, seed=1, window_files=2, flip=True), dict(batch=25, seed=1, shuffle_files=2)),
    ("jpeg", dict(batch_size=8, seed=4, crop=24, flip=True, rank=1, world_size=3, order="global"),
     dict(batch=8, seed=4, crop=24, rank=1, ranks=3, order="global")),
]


@pytest.mark.parametrize("which,kw,flags", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_same_batches_as_train(which, kw, flags, raw_data, jpeg_data):
    data = raw_data if which == "raw" else jpeg_data
    want = bench_digests(data, 3, **flags)
    assert len(want) == 3
    loader = convoy.Loader(data, with_ids=True, **kw)
    got = []
    for e in range(3):
        loader.set_epoch(e)
        got.append(epoch_digest(loader))
    assert got == want
    if kw.get("train", True):
        assert len(set(got)) == 3, "every epoch has its own order and crops"


def test_crops_rebuilt_from_the_files(raw_data):
    images, labels = stored(raw_data)
    h = w = 12
    # No crop: the stored sample, mirrored or not; flips are drawn about half the time.
    mirrored = 0
    for x, y, ids in convoy.Loader(raw_data, 16, seed=2, flip=True, with_ids=True):
        assert (y == labels[ids]).all()
        for xi, i in zip(x, ids):
            same, flipped = (xi == images[i]).all(), (xi == images[i][:, ::-1]).all()
            assert same or flipped
            mirrored += bool(flipped and not same)
    assert 0.3 < mirrored / (16 * 16) < 0.7
    # A fixed-size window without padding: one of the stored sample's 8x8 windows.
    for x, y, ids in convoy.Loader(raw_data, 16, seed=4, crop=8, with_ids=True):
        for xi, i in zip(x, ids):
            assert any((xi == images[i][t:t + 8, l:l + 8]).all() for t in range(h - 7) for l in range(w - 7))
    # Evaluation: every sample of the rank, its files in file order, the centred crop, no flip.
    files = list(batches.Dataset(raw_data).files())
    for rank in range(2):
        loader = convoy.Loader(raw_data, 16, train=False, drop_last=False, crop=8, rank=rank, world_size=2,
                               flip=True, with_ids=True)
        got = [b for b in loader]
        ids = np.concatenate([b[2] for b in got])
        assert (ids == np.concatenate([f.ids for f in files[rank::2]])).all()
        assert len(got) == len(loader) and len(got[-1][0]) == len(ids) - 16 * (len(got) - 1)
        x = np.concatenate([b[0] for b in got])
        assert (x == images[ids][:, 2:10, 2:10]).all()


def test_api_and_zero_copy(raw_data):
    loader = convoy.Loader(raw_data, 16, seed=1, crop=8, pad=1, flip=True)
    meta = batches.Dataset(raw_data)
    assert loader.classes == meta.classes
    assert np.allclose(loader.mean, meta.mean) and np.allclose(loader.std, meta.std)
    assert loader.image_shape == (8, 8, 3) and loader.stored_shape == (12, 12, 3)
    assert loader.num_samples == 263 and loader.batch_size == 16 and loader.train and loader.drop_last
    assert len(loader) == 263 // 16
    it = iter(loader)
    assert it is loader
    a_img, a_lab = next(it)
    b_img, b_lab = next(it)
    assert a_img.shape == (16, 8, 8, 3) and a_img.dtype == np.uint8 and a_img.flags.c_contiguous
    assert a_lab.shape == (16,) and a_lab.dtype == np.int64
    # Views of the loader's buffers, not copies; each batch its own while it is alive.
    for arr in (a_img, a_lab, b_img):
        assert arr.base is not None and not arr.flags.owndata
    assert not np.shares_memory(a_img, b_img) and not np.shares_memory(a_lab, b_lab)
    # Batches dropped before the next is asked for lend their buffers to later batches: over
    # several epochs, no more buffers than the prefetch window and those in hand.
    del a_img, a_lab, b_img, b_lab
    small = convoy.Loader(raw_data, 8, seed=1, prefetch=3)
    seen = set()
    for e in range(4):
        small.set_epoch(e)
        seen |= {b[0].__array_interface__["data"][0] for b in small}
    assert len(seen) <= small.prefetch + 4 < 4 * len(small)
    # An array outlives its loader.
    keep = next(it)[0]
    copy = keep.copy()
    del it, loader
    assert (keep == copy).all()


def test_epochs_replay_and_differ(raw_data):
    def ids_of(loader):
        return np.concatenate([b[2] for b in loader])
    loader = convoy.Loader(raw_data, 16, seed=6, with_ids=True, epoch=1)
    first = ids_of(loader)
    assert (ids_of(loader) == first).all(), "iterating again replays the same epoch"
    half = iter(loader)
    for _ in range(3):
        next(half)
    assert (ids_of(loader) == first).all(), "a new iteration starts the epoch from the beginning"
    loader.set_epoch(2)
    assert loader.epoch == 2
    assert not (ids_of(loader) == first).all()
    assert (ids_of(convoy.Loader(raw_data, 16, seed=6, with_ids=True, epoch=2)) == ids_of(loader)).all()


def test_torch_tensors(raw_data):
    torch = pytest.importorskip("torch")
    loader = convoy.Loader(raw_data, 16, seed=3, crop=8, as_torch=True, with_ids=True)
    plain = convoy.Loader(raw_data, 16, seed=3, crop=8, with_ids=True)
    for (x, y, i), (nx, ny, ni) in zip(loader, plain):
        assert isinstance(x, torch.Tensor) and x.dtype == torch.uint8 and x.shape == (16, 8, 8, 3)
        assert y.dtype == torch.int64 and i.dtype == torch.int64
        assert (x.numpy() == nx).all() and (y.numpy() == ny).all() and (i.numpy() == ni).all()
    # torch.from_dlpack on the numpy arrays shares their memory too.
    img, lab = next(iter(plain))[:2]
    t = torch.from_dlpack(img)
    assert t.data_ptr() == img.__array_interface__["data"][0]


def test_every_sample_once_across_ranks(even_data, raw_data):
    all_ids = np.arange(180)
    for world in (1, 2, 3):
        for epoch in (0, 1):
            got = []
            for rank in range(world):
                loader = convoy.Loader(even_data, 10, rank=rank, world_size=world, seed=8, epoch=epoch,
                                       with_ids=True, flip=True)
                ids = np.concatenate([b[2] for b in loader])
                assert len(ids) == len(loader) * 10 == 180 // world
                got.append(ids)
            union = np.concatenate(got)
            assert len(np.unique(union)) == len(union), "no sample twice"
            assert (np.sort(union) == all_ids).all()
    # Uneven shares: every rank yields the same number of full batches, with no sample twice; in
    # evaluation every sample comes exactly once.
    for world in (1, 2, 3):
        lens, train_ids, eval_ids = set(), [], []
        for rank in range(world):
            loader = convoy.Loader(raw_data, 8, rank=rank, world_size=world, seed=2, with_ids=True)
            lens.add(len(loader))
            train_ids.append(np.concatenate([b[2] for b in loader]))
            assert len(train_ids[-1]) == 8 * len(loader)
            ev = convoy.Loader(raw_data, 8, rank=rank, world_size=world, train=False, drop_last=False, with_ids=True)
            eval_ids.append(np.concatenate([b[2] for b in ev]))
        assert len(lens) == 1
        union = np.concatenate(train_ids)
        assert len(np.unique(union)) == len(union)
        assert (np.sort(np.concatenate(eval_ids)) == np.arange(263)).all()


def test_global_order_same_global_batches_at_any_world_size(raw_data):
    """order='global': the global batches of 24 samples are the same at world_size 1, 2, 3 and 4, each
    rank's batch its slice of one; every sample at most once; local order's differ."""
    def global_batches(world, **kw):
        loaders = [convoy.Loader(raw_data, 24 // world, rank=r, world_size=world, seed=6, epoch=1, with_ids=True, **kw)
                   for r in range(world)]
        assert len({len(l) for l in loaders}) == 1
        return [np.concatenate([b[2] for b in batches]) for batches in zip(*loaders)]
    one = global_batches(1, order="global")
    assert len(one) == 263 // 24
    ids = np.concatenate(one)
    assert len(np.unique(ids)) == len(ids) == len(one) * 24
    for world in (2, 3, 4):
        got = global_batches(world, order="global")
        assert len(got) == len(one) and all((a == b).all() for a, b in zip(got, one)), f"world_size {world}"
    local = global_batches(2)
    assert not all((a == b).all() for a, b in zip(local, one)), "local order deals other batches at 2 ranks"
    with pytest.raises(ValueError, match="order"):
        convoy.Loader(raw_data, 4, order="sideways")


def test_drop_last(raw_data):
    with pytest.raises(ValueError, match="drop_last"):
        convoy.Loader(raw_data, 16, drop_last=False)
    kept = convoy.Loader(raw_data, 16, train=False, drop_last=False)
    dropped = convoy.Loader(raw_data, 16, train=False)
    assert len(kept) == 17 and len(dropped) == 16
    assert sum(len(b[1]) for b in kept) == 263 and sum(len(b[1]) for b in dropped) == 256


def test_bad_arguments(raw_data, tmp_path):
    for kw in (dict(batch_size=0), dict(rank=2, world_size=2), dict(scale=(0.5, 0.1)), dict(window_files=0)):
        args = dict(batch_size=4)
        args.update(kw)
        with pytest.raises(ValueError):
            convoy.Loader(raw_data, **args)
    with pytest.raises(convoy.Error, match="crop 13"):
        convoy.Loader(raw_data, 4, crop=13)
    with pytest.raises(convoy.Error, match=str(tmp_path)):
        convoy.Loader(str(tmp_path), 4)
    assert len(convoy.Loader(pathlib.Path(raw_data), 4)) == 263 // 4, "a path object names the folder too"


# Each argument outside what it means, and the argument named in the error (the same rules as a
# config's [data] section).
BAD_AUGMENT = [
    (dict(pad=2000, crop=8), "pad"),
    (dict(crop=100000), "crop"),
    (dict(eval_resize=100000, crop=8, train=False), "eval_resize"),
    (dict(random_resized_crop=True, crop=8, scale=(0.5, 2.0)), "scale"),
    (dict(random_resized_crop=True, crop=8, scale=(0.0, 1.0)), "scale"),
    (dict(random_resized_crop=True, crop=8, ratio=(1e-4, 1.0)), "ratio"),
    (dict(random_resized_crop=True), "crop"),
    (dict(eval_resize=16, train=False), "crop"),
    (dict(random_resized_crop=True, crop=8, pad=2), "pad"),
    (dict(eval_resize=8, crop=10, train=False), "eval_resize"),
    (dict(scale=(0.5, 1.5)), "scale"),  # checked without random_resized_crop too, as in a config
]


@pytest.mark.parametrize("kw,named", BAD_AUGMENT, ids=[str(c[0]) for c in BAD_AUGMENT])
def test_bad_augmentation_arguments(kw, named, raw_data):
    with pytest.raises(ValueError, match=named):
        convoy.Loader(raw_data, 4, **kw)


# A batch larger than what the rank is dealt would yield no batch at all: (arguments, the samples
# named: in training the dataset's, which make no global batch of batch_size x world_size; in
# evaluation the rank's). raw_data: 6 files of 40 and one of 23.
NO_BATCH = [
    (dict(batch_size=300), 263),
    (dict(batch_size=100, rank=1, world_size=3), 263),
    (dict(batch_size=40, rank=2, world_size=8), 263),
    (dict(batch_size=300, train=False), 263),
    (dict(batch_size=200, train=False, rank=1, world_size=2), 120),
    (dict(batch_size=8, train=False, drop_last=False, rank=7, world_size=8), 0),
]


@pytest.mark.parametrize("kw,samples", NO_BATCH, ids=[str(c[0]) for c in NO_BATCH])
def test_batch_larger_than_the_share_is_refused(kw, samples, raw_data):
    with pytest.raises(ValueError) as e:
        convoy.Loader(raw_data, **kw)
    msg = str(e.value)
    assert f"batch_size {kw['batch_size']}" in msg and f"{samples} samples" in msg, msg


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_file_names_its_path(damage, raw_data, copy_of):
    data = copy_of(raw_data)
    victim = os.path.join(data, "batch_00003.cvb")
    size = os.path.getsize(victim)
    with open(victim, "r+b") as f:
        if damage == "flip":
            f.seek(size - 100)
            b = f.read(1)
            f.seek(size - 100)
            f.write(bytes([b[0] ^ 0x40]))
        else:
            f.truncate(size - 1000)
    for train in (True, False):
        loader = convoy.Loader(data, 16, train=train, drop_last=train)
        with pytest.raises(convoy.Error) as e:
            for _ in loader:
                pass
        assert victim in str(e.value)
        assert isinstance(e.value, RuntimeError)


@pytest.mark.parametrize("how", ["another dataset's file", "two files swapped"])
def test_wrong_file_names_its_path(how, raw_data, copy_of, tmp_path):
    # Files that are sound by themselves but not the ones dataset.json lists: refused before any of
    # their samples is used, as `datagen verify` refuses them.
    data = copy_of(raw_data)
    a, b = (os.path.join(data, f"batch_0000{i}.cvb") for i in (1, 2))
    if how == "another dataset's file":
        # Of the same shape and size: only the contents differ.
        other = synth(tmp_path / "other", files=7, per_file=40, last=23, size=12, channels=3, classes=5, seed=9)
        shutil.copy(os.path.join(other, "batch_00001.cvb"), a)
        victims = [a]
    else:
        os.rename(a, a + ".tmp")
        os.rename(b, a)
        os.rename(a + ".tmp", b)
        victims = [a, b]
    for train in (True, False):
        loader = convoy.Loader(data, 16, train=train, drop_last=train)
        with pytest.raises(convoy.Error) as e:
            for _ in loader:
                pass
        msg = str(e.value)
        assert any(msg.startswith(v + ": ") for v in victims) and "dataset.json" in msg and "\n" not in msg, msg


def test_whole_images_through_the_loader(tmp_path):
    """A dataset of whole images at their own sizes (datagen --resize short:S, batch-file format v2):
    the module yields crop x crop batches from each image, and refuses it without crop, naming it."""
    fm = "/usr/share/datasets/fashion-mnist"
    datagen = os.path.join(os.path.dirname(TRAIN), "datagen")
    run_tool(datagen, "idx2tar", "--images", f"{fm}/t10k-images-idx3-ubyte.gz",
             "--labels", f"{fm}/t10k-labels-idx1-ubyte.gz", "--out", tmp_path / "t.tar")
    data = str(tmp_path / "whole")
    run_tool(datagen, "--input", tmp_path / "t.tar", "--output", data, "--resize", "short:20", "--max-side", "24",
             "--channels", "1", "--per-file", "2000", "--threads", "2")
    ds = batches.Dataset(data)
    assert ds.varied and ds.shape == (None, None, 1)
    bf = next(ds.files())
    assert bf.dims.tolist()[0] == [20, 20] and bf.image(0).shape == (20, 20, 1)
    loader = convoy.Loader(data, 500, crop=16, random_resized_crop=True, flip=True, with_ids=True)
    assert loader.stored_shape == (None, None, 1) and loader.image_shape == (16, 16, 1)
    n = 0
    for x, y, ids in loader:
        assert x.shape == (500, 16, 16, 1)
        n += len(ids)
    assert n == 10000
    evaluation = convoy.Loader(data, 1000, train=False, drop_last=False, crop=16, eval_resize=18)
    assert sum(len(y) for _, y in evaluation) == 10000
    with pytest.raises(convoy.Error, match="^crop: the dataset holds whole images"):
        convoy.Loader(data, 4)
