// The `convoy` Python module: the trainer's own loader (input/loader.h) as an iterable over one
// epoch of (images, labels) numpy arrays, or torch tensors through DLPack, handed over uncopied.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "input/augment_spec.h"
#include "input/loader.h"
#include "input/loader_sizing.h"
#include "shared/dataset_meta.h"
#include "shared/error.h"

namespace py = pybind11;

namespace {

using convoy::HostBatch;

// A batch's buffers while Python holds arrays over them. They come back to the pool when the last
// array goes, and the next batch is built into them: a fresh batch each step would mean new pages
// for the kernel to fault in and zero, a cost the trainer's loader never pays.
struct Slot {
  HostBatch batch;
  std::vector<int64_t> labels;  // HostBatch's int32 labels widened, as torch's losses want them
};

class SlotPool {
 public:
  std::unique_ptr<Slot> take() {
    std::lock_guard<std::mutex> lk(mu_);
    if (free_.empty()) return std::make_unique<Slot>();
    std::unique_ptr<Slot> s = std::move(free_.back());
    free_.pop_back();
    return s;
  }
  void give(std::unique_ptr<Slot> s) {
    std::lock_guard<std::mutex> lk(mu_);
    // A consumer that keeps many batches alive and then drops them all should not pin them all.
    if (free_.size() < 4) free_.push_back(std::move(s));
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<Slot>> free_;
};

// What the arrays' base capsule holds. The pool is shared, so arrays may outlive their Loader.
struct SlotOwner {
  std::unique_ptr<Slot> slot;
  std::shared_ptr<SlotPool> pool;
  ~SlotOwner() { pool->give(std::move(slot)); }
};

// Ranks on this node, as torchrun or Open MPI's mpirun tell their processes, for the readers'
// share of the cores.
int local_ranks_from_env() {
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const char* v = std::getenv(name)) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  return 1;
}

// The constructor's arguments as Python passes them.
struct Args {
  std::string path;
  int batch_size = 0, rank = 0, world_size = 1;
  uint64_t seed = 0;
  int epoch = 0, crop = 0, pad = 0;
  bool flip = false, random_resized_crop = false;
  std::pair<double, double> scale{0.08, 1.0}, ratio{3.0 / 4.0, 4.0 / 3.0};
  bool train = true;
  int eval_resize = 0, readers = 0;
  bool drop_last = true;
  int window_files = 4, prefetch = 0;
  std::string order = "local";
  bool with_ids = false, as_torch = false;
};

// Each argument on its own and with the others, before any file is read; ValueError names it.
void check_args(const Args& a) {
  if (a.batch_size <= 0) throw py::value_error("batch_size must be positive");
  if (a.world_size <= 0 || a.rank < 0 || a.rank >= a.world_size)
    throw py::value_error("rank must be in [0, world_size) and world_size positive");
  if (a.epoch < 0) throw py::value_error("epoch must not be negative");
  if (a.crop < 0 || a.pad < 0 || a.eval_resize < 0 || a.readers < 0 || a.prefetch < 0)
    throw py::value_error("crop, pad, eval_resize, readers and prefetch must not be negative");
  if (a.window_files <= 0) throw py::value_error("window_files must be positive");
  if (!convoy::parse_order(a.order)) throw py::value_error("order must be 'local' or 'global', not '" + a.order + "'");
  if (a.train && !a.drop_last)
    throw py::value_error(
        "drop_last=False is not supported with train=True: in training the loader yields the same number of full "
        "batches on every rank (as `train` does), so the samples past them are left out; use train=False for "
        "every sample");
}

// The augmentation the arguments ask for, refused (ValueError) by the rules of a config's [data].
convoy::AugmentSpec augment_of(const Args& a) {
  convoy::AugmentSpec g;
  g.crop = a.crop, g.pad = a.pad, g.flip = a.flip, g.random_resized_crop = a.random_resized_crop;
  g.scale[0] = a.scale.first, g.scale[1] = a.scale.second;
  g.ratio[0] = a.ratio.first, g.ratio[1] = a.ratio.second;
  g.eval_resize = a.eval_resize;
  if (const std::string problem = convoy::augment_problem(g); !problem.empty()) throw py::value_error(problem);
  return g;
}

// The consumer takes pixels only: the loader mirrors them itself, so the flips are all 0. One core
// is left for the Python thread that runs the step, as the CUDA backend keeps one for its host thread.
convoy::LoaderOptions loader_options(const Args& a) {
  const int readers = convoy::choose_readers(a.readers, 1, local_ranks_from_env()).readers;
  return convoy::loader_options(
      a.path, a.batch_size, a.train, convoy::SampleOutput::mirrored, augment_of(a),
      convoy::DataShare{a.rank, a.world_size, a.seed, a.window_files, *convoy::parse_order(a.order)}, readers,
      a.prefetch);
}

// Batches per epoch on this rank, as the loader deals them (drop_last=False keeps an evaluation's
// last partial batch); a batch_size that leaves none is refused, as an epoch of no batches would
// end every loop at once without a word.
long long batches_per_epoch(const convoy::Loader& l, const Args& a) {
  const long long n = l.samples_per_epoch();
  const size_t files = l.meta().files.size();
  const std::string rank = "rank " + std::to_string(a.rank) + " of " + std::to_string(a.world_size);
  const std::string b = "batch_size " + std::to_string(a.batch_size);
  if (a.train) {
    if (l.batches_per_epoch() == 0)
      throw py::value_error(b + ": the dataset's " + std::to_string(l.meta().num_samples) +
                            " samples make no global batch of " + std::to_string(a.world_size) + " x " +
                            std::to_string(a.batch_size) + ", so training would yield no batch");
    return l.batches_per_epoch();
  }
  const long long len = a.drop_last ? n / a.batch_size : l.batches_per_epoch();
  if (len == 0)
    throw py::value_error(b + ": " + rank + " is dealt " + std::to_string(n) + " samples (of " + std::to_string(files) +
                          " batch files dealt in turn)" + (a.drop_last ? " and drop_last=True" : "") +
                          ", so evaluation would yield no batch");
  return len;
}

// How long next() waits for a late batch before it looks at Python's signals (Ctrl-C) again.
constexpr std::chrono::milliseconds kSignalCheck{100};

class PyLoader {
 public:
  explicit PyLoader(const Args& a)
      : pool_(std::make_shared<SlotPool>()), epoch_(a.epoch), drop_last_(a.drop_last), with_ids_(a.with_ids) {
    check_args(a);
    opt_ = loader_options(a);
    if (a.as_torch) from_dlpack_ = py::module_::import("torch").attr("from_dlpack");
    current_thread_ = py::module_::import("threading").attr("current_thread");
    weak_ref_ = py::module_::import("weakref").attr("ref");
    meta_ = convoy::read_dataset_meta(a.path);
    loader_ = std::make_unique<convoy::Loader>(opt_, meta_);
    len_ = batches_per_epoch(*loader_, a);
    // The readers start on the first epoch now, while the caller builds its model.
    start(epoch_);
  }

  ~PyLoader() {
    // In a child of fork() the reader threads are the parent's: joining them would wait forever.
    // The child's copy of the loader is left unfreed instead.
    if (::getpid() != pid_) (void)loader_.release();
  }
  PyLoader(const PyLoader&) = delete;
  PyLoader& operator=(const PyLoader&) = delete;

  PyLoader& iter() {
    same_process("iter()");
    claim("iter()");
    if (taken_ > 0 || done_) start(epoch_);
    return *this;
  }

  py::object next() {
    same_process("next()");
    if (owner_.is_none()) owner_ = weak_ref_(current_thread_());
    if (done_ || taken_ >= len_) {
      done_ = true;
      throw py::stop_iteration();
    }
    std::unique_ptr<Slot> slot = pool_->take();
    InNext inside(in_next_);
    for (;;) {
      std::unique_lock<std::mutex> lk;
      const convoy::Loader::Take t = without_gil(lk, [&] { return loader_->next_for(slot->batch, kSignalCheck); });
      if (t == convoy::Loader::Take::batch) {
        ++taken_;
        break;
      }
      if (t == convoy::Loader::Take::end) {
        done_ = true;
        lk.unlock();
        pool_->give(std::move(slot));
        throw py::stop_iteration();
      }
      // A batch is late (a slow or hung file system): Ctrl-C raises KeyboardInterrupt now, not when it comes.
      lk.unlock();
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
    const HostBatch& b = slot->batch;
    slot->labels.assign(b.labels.begin(), b.labels.end());
    const convoy::SampleFormat& f = loader_->sample_format();
    const py::ssize_t n = b.n, h = f.height, w = f.width, c = f.channels;
    uint8_t* pixels = slot->batch.pixels.data();
    int64_t* labels = slot->labels.data();
    // Dataset ids are non-negative int64 stored as uint64 keys: the same bytes.
    auto* ids = reinterpret_cast<int64_t*>(slot->batch.keys.data());
    auto* owner = new SlotOwner{std::move(slot), pool_};
    py::capsule base(owner, [](void* p) { delete static_cast<SlotOwner*>(p); });
    py::array images(py::dtype::of<uint8_t>(), {n, h, w, c}, {h * w * c, w * c, c, py::ssize_t(1)}, pixels, base);
    py::array labels_a(py::dtype::of<int64_t>(), {n}, {py::ssize_t(sizeof(int64_t))}, labels, base);
    py::list out;
    out.append(convert(images));
    out.append(convert(labels_a));
    if (with_ids_)
      out.append(convert(py::array(py::dtype::of<int64_t>(), {n}, {py::ssize_t(sizeof(int64_t))}, ids, base)));
    return py::tuple(out);
  }

  void set_epoch(int epoch) {
    if (epoch < 0) throw py::value_error("epoch must not be negative");
    same_process("set_epoch()");
    claim("set_epoch()");
    epoch_ = epoch;
    start(epoch_);
    owner_ = py::none();  // the thread that iterates it next takes it
  }

  long long len() const { return len_; }
  int epoch() const { return epoch_; }
  const convoy::DatasetMeta& meta() const { return meta_; }
  const convoy::LoaderOptions& options() const { return opt_; }
  const convoy::Loader& loader() const { return *loader_; }
  bool drop_last() const { return drop_last_; }

 private:
  // Threads inside next(), counted while they wait without the GIL.
  struct InNext {
    int& n;
    explicit InNext(int& count) : n(count) { ++n; }
    ~InNext() { --n; }
    InNext(const InNext&) = delete;
    InNext& operator=(const InNext&) = delete;
  };

  // Runs f() without the GIL and with busy_ held (in lk), then takes the GIL back with busy_ still
  // held, so that f's work on the loader and the caller's bookkeeping after it are one step to every
  // other thread. Lock order: busy_, then the GIL; no thread waits for busy_ holding the GIL. The GIL
  // is taken back by a plain call, not in a destructor: at interpreter exit Python ends a daemon
  // thread inside that call with pthread_exit, whose unwinding out of a destructor (noexcept) would
  // abort the whole process.
  template <class F>
  auto without_gil(std::unique_lock<std::mutex>& lk, F&& f) -> decltype(f()) {
    std::optional<decltype(f())> result;
    std::exception_ptr error;
    PyThreadState* state = PyEval_SaveThread();
    try {
      lk = std::unique_lock<std::mutex>(busy_);
      result.emplace(f());
    } catch (...) {
      error = std::current_exception();
    }
    PyEval_RestoreThread(state);
    if (error) std::rethrow_exception(error);
    return std::move(*result);
  }

  // A Loader is one stream of batches. Restarting it (iter() once batches were taken, set_epoch())
  // while another thread iterates it would hand that thread batches of a new pass, or split one epoch
  // between two `for` loops, without a word: refused while that thread is alive and its epoch is
  // unfinished, or while another thread is inside next(). Threads may share one pass through next().
  void claim(const char* what) {
    py::object me = current_thread_(), owner = owner_.is_none() ? py::none() : owner_();
    const bool held = !owner.is_none() && !owner.is(me) && !done_ && owner.attr("is_alive")().cast<bool>();
    if (held || in_next_ > 0) {
      const std::string other = held ? "another thread, '" + owner.attr("name").cast<std::string>() + "', iterates"
                                     : "another thread takes batches of";
      throw std::runtime_error("convoy.Loader: " + std::string(what) + " in thread '" +
                               me.attr("name").cast<std::string>() + "' while " + other + " epoch " +
                               std::to_string(epoch_) + " (" + std::to_string(taken_) + " of " + std::to_string(len_) +
                               " batches taken): a Loader is one stream of batches; give each thread its own "
                               "convoy.Loader, or let that thread finish the epoch (or call set_epoch()) first");
    }
    owner_ = weak_ref_(me);
  }

  // A child of fork() has none of the parent's reader threads: its batches would never come.
  void same_process(const char* what) const {
    if (::getpid() == pid_) return;
    throw std::runtime_error("convoy.Loader: " + std::string(what) + " in process " + std::to_string(::getpid()) +
                             ", a fork of process " + std::to_string(pid_) +
                             " that made the loader, whose reader threads are not in this one: make the Loader in "
                             "the process that iterates it (after the fork)");
  }

  // Everything the epoch yields is fixed by (seed, epoch, rank); starting it again replays it.
  void start(int epoch) {
    std::unique_lock<std::mutex> lk;
    without_gil(lk, [&] {
      loader_->start_epoch(epoch);
      return true;
    });
    taken_ = 0;
    done_ = false;
  }

  py::object convert(const py::array& a) const { return from_dlpack_.is_none() ? py::object(a) : from_dlpack_(a); }

  convoy::DatasetMeta meta_;
  convoy::LoaderOptions opt_;
  std::unique_ptr<convoy::Loader> loader_;
  std::shared_ptr<SlotPool> pool_;
  // loader_ is used by one thread at a time, without the GIL; the fields below are the GIL's, and
  // those of the pass (taken_, done_) change only with busy_ held too (without_gil).
  std::mutex busy_;
  py::object from_dlpack_ = py::none(), current_thread_ = py::none(), weak_ref_ = py::none();
  // A weak reference to the threading.Thread iterating the pass, or None. Weak: a Thread object that
  // holds the loader would otherwise keep both alive for good (pybind11 objects are not collected
  // in cycles).
  py::object owner_ = py::none();
  int in_next_ = 0;
  const pid_t pid_ = ::getpid();  // the process whose reader threads the loader has
  int epoch_ = 0;
  long long taken_ = 0, len_ = 0;
  bool done_ = false, drop_last_ = true, with_ids_ = false;
};

}  // namespace

PYBIND11_MODULE(convoy, m) {
  m.doc() =
      "convoy's batch-file loader for Python: the same reader threads, shuffle, sharding and augmentation as "
      "`train`, yielding uint8 NHWC images and int64 labels without a copy.";
  m.attr("__version__") = CONVOY_VERSION;
  // Errors name the file (as the C++ tools print them); a subclass of RuntimeError.
  py::register_exception<convoy::Error>(m, "Error", PyExc_RuntimeError);
  // pybind11 2.10 (before its gil_safe_call_once) looks numpy's C API up on first use into a
  // function-local static, importing numpy.core.multiarray under the static's guard; the import can
  // let the GIL go, and a second thread that takes it and reaches the same static waits on the guard
  // holding the GIL: both wait forever (two loaders' first batches in two threads). Looked up here,
  // once, while the module is imported.
  (void)py::dtype::of<uint8_t>();

  py::class_<PyLoader>(m, "Loader", R"doc(
Loader(path, batch_size, *, rank=0, world_size=1, seed=0, epoch=0, crop=0, pad=0, flip=False,
       random_resized_crop=False, scale=(0.08, 1.0), ratio=(3/4, 4/3), train=True, eval_resize=0,
       readers=0, drop_last=True, window_files=4, order='local', prefetch=0, with_ids=False,
       as_torch=False)

Iterating gives one epoch of (images, labels): images uint8 [n, h, w, c] (NHWC, already cropped,
resized and mirrored), labels int64 [n]; with with_ids=True a third array, each sample's dataset id.
The arrays are views of the loader's buffers (no copy); the buffers are reused once every array over
them is gone. as_torch=True gives torch tensors instead, through DLPack (torch.from_dlpack).

batch_size is per process: `train --batch B` over N ranks is batch_size=B/N here. The order, the
sharding over (rank, world_size) and each sample's crop and flip are a function of (seed, epoch,
rank, world_size, batch_size, order) alone, the same as `train` with the same options (window_files
is train's --shuffle-files, order its --order). Each iteration runs epoch `epoch`; set_epoch(e)
picks the next one and starts reading it. Training lays the epoch's shuffled files out as one
sequence of samples. With order='local' each rank gets a contiguous share of it (the files it
overlaps, about 1/world_size of them), shuffled in windows of window_files files; with
order='global' the sequence is shuffled in windows of window_files files whatever world_size is,
cut into global batches of world_size x batch_size samples, and each rank takes its slice of every
one: the global batches are the same at any world_size (as DistributedSampler's), but every rank
reads every file. Either way: len(loader) full batches, the same number on every rank, every sample
once but fewer than world_size x batch_size (so drop_last=False is refused); evaluation (train=False)
deals whole files to ranks in turn and takes every sample of the rank in file order with the centred
crop (eval_resize: the short side first to that size), and
drop_last=False keeps the last partial batch. readers=0 picks one reader per core of this process's
share, less one for the caller. random_resized_crop=True draws the area fraction from scale and
the aspect ratio (w/h) from ratio, and needs crop. Arguments out of range (by the rules of a config's
[data] section), and a batch_size that would yield no batch (training: world_size x batch_size
beyond the dataset; evaluation: beyond the rank's share), raise
ValueError. Damaged files, and files that are not the ones dataset.json lists, raise convoy.Error
naming the file.

Threads: a Loader is one stream of batches; threads that read in parallel each need their own.
Threads may share one pass through next() (each batch goes to one of them), but starting the epoch
over (iter() once batches were taken, or set_epoch()) while another thread iterates an unfinished
epoch raises RuntimeError. next() waits for a batch without the GIL, and Ctrl-C interrupts the wait.
)doc")
      .def(py::init([](const std::filesystem::path& path, int batch_size, int rank, int world_size, uint64_t seed,
                       int epoch, int crop, int pad, bool flip, bool random_resized_crop,
                       std::pair<double, double> scale, std::pair<double, double> ratio, bool train, int eval_resize,
                       int readers, bool drop_last, int window_files, const std::string& order, int prefetch,
                       bool with_ids, bool as_torch) {
             Args a;
             a.path = path.string(), a.batch_size = batch_size, a.rank = rank, a.world_size = world_size;
             a.seed = seed, a.epoch = epoch, a.crop = crop, a.pad = pad, a.flip = flip;
             a.random_resized_crop = random_resized_crop, a.scale = scale, a.ratio = ratio, a.train = train;
             a.eval_resize = eval_resize, a.readers = readers, a.drop_last = drop_last;
             a.window_files = window_files, a.order = order, a.prefetch = prefetch, a.with_ids = with_ids;
             a.as_torch = as_torch;
             return std::make_unique<PyLoader>(a);
           }),
           py::arg("path"), py::arg("batch_size"), py::kw_only(), py::arg("rank") = 0, py::arg("world_size") = 1,
           py::arg("seed") = 0, py::arg("epoch") = 0, py::arg("crop") = 0, py::arg("pad") = 0, py::arg("flip") = false,
           py::arg("random_resized_crop") = false, py::arg("scale") = std::make_pair(0.08, 1.0),
           py::arg("ratio") = std::make_pair(3.0 / 4.0, 4.0 / 3.0), py::arg("train") = true, py::arg("eval_resize") = 0,
           py::arg("readers") = 0, py::arg("drop_last") = true, py::arg("window_files") = 4, py::arg("order") = "local",
           py::arg("prefetch") = 0, py::arg("with_ids") = false, py::arg("as_torch") = false)
      .def("__iter__", &PyLoader::iter, py::return_value_policy::reference_internal)
      .def("__next__", &PyLoader::next)
      .def("__len__", &PyLoader::len, "batches per epoch on this rank")
      .def("__repr__",
           [](const PyLoader& l) {
             const convoy::LoaderOptions& o = l.options();
             return "convoy.Loader('" + o.dir + "', " + std::to_string(o.local_batch) +
                    ", rank=" + std::to_string(o.share.rank) + ", world_size=" + std::to_string(o.share.ranks) +
                    ", epoch=" + std::to_string(l.epoch()) + ", train=" + (o.train ? "True" : "False") +
                    "): " + std::to_string(l.len()) + " batches per epoch";
           })
      .def("set_epoch", &PyLoader::set_epoch, py::arg("epoch"),
           "the epoch the next iteration runs; its files start being read now")
      .def_property_readonly("epoch", &PyLoader::epoch)
      .def_property_readonly(
          "classes", [](const PyLoader& l) { return l.meta().classes; }, "the dataset's class names")
      .def_property_readonly(
          "mean", [](const PyLoader& l) { return l.meta().mean; },
          "per-channel mean of the dataset (dataset.json), in pixel units 0..255")
      .def_property_readonly(
          "std", [](const PyLoader& l) { return l.meta().std; },
          "per-channel standard deviation of the dataset (dataset.json), in pixel units")
      .def_property_readonly(
          "image_shape",
          [](const PyLoader& l) {
            const convoy::SampleFormat& f = l.loader().sample_format();
            return py::make_tuple(f.height, f.width, f.channels);
          },
          "(h, w, c) of the images yielded (after the crop)")
      .def_property_readonly(
          "stored_shape",
          [](const PyLoader& l) {
            const convoy::ImageShape& s = l.meta().shape;
            if (l.meta().resize.varied) return py::make_tuple(py::none(), py::none(), s.channels);
            return py::make_tuple(s.height, s.width, s.channels);
          },
          "(h, w, c) of the images in the batch files; (None, None, c) for whole images at their own sizes "
          "(batch-file format v2)")
      .def_property_readonly(
          "num_samples", [](const PyLoader& l) { return l.meta().num_samples; }, "samples in the dataset (all ranks)")
      .def_property_readonly("batch_size", [](const PyLoader& l) { return l.options().local_batch; })
      .def_property_readonly("rank", [](const PyLoader& l) { return l.options().share.rank; })
      .def_property_readonly("world_size", [](const PyLoader& l) { return l.options().share.ranks; })
      .def_property_readonly("train", [](const PyLoader& l) { return l.options().train; })
      .def_property_readonly("drop_last", &PyLoader::drop_last)
      .def_property_readonly("readers", [](const PyLoader& l) { return l.loader().readers(); })
      .def_property_readonly(
          "prefetch", [](const PyLoader& l) { return l.loader().prefetch(); }, "batches the readers keep ready")
      .def_property_readonly(
          "memory_bound", [](const PyLoader& l) { return l.loader().memory_bound(); },
          "the most bytes the loader's own buffers take");
}
