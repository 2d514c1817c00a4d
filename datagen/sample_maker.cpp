// Both ways read and decode alike and part once the decoded size is known, which is when the
// lane's router decides where the image is resized. Every buffer is the thread's own and reused.
#include "datagen/sample_maker.h"

#include <cstring>
#include <vector>

#include "datagen/image_codec.h"
#include "datagen/timeline.h"
#include "shared/resize.h"
#include "shared/timer.h"

namespace convoy::datagen {
namespace {

// Room in this thread's reused decode buffer for a width x height image. Decoding into fresh
// memory for every image costs an mmap, page faults and an munmap each, which many threads
// then queue for (and more so once CUDA watches the address space).
struct Scratch {
  std::vector<uint8_t> buffer;
  int width = 0, height = 0;
  uint8_t* place(int w, int h, int channels) {
    const size_t need = size_t(w) * size_t(h) * size_t(channels);
    if (buffer.size() < need) buffer.resize(need);
    width = w, height = h;
    return buffer.data();
  }
  cv::Mat image(int channels) { return cv::Mat(height, width, CV_8UC(channels), buffer.data()); }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

std::string SampleMaker::make(uint64_t id, const SlotOut& out, Phases& t) const {
  thread_local std::vector<uint8_t> bytes;
  Laps lap;
  source_.read(id, bytes);
  t.read += lap(Span::read);
  try {
    Scratch& sc = scratch();
    const ImageCodec::Placement place = [&](int width, int height) { return sc.place(width, height, opt_.channels); };
    ImageCodec& codec = thread_codec();
    // A crop reads only the centred square, which a JPEG can give alone, for less work.
    cv::Mat img = opt_.resize == ResizePolicy::crop
                      ? codec.decode_centre(bytes.data(), bytes.size(), opt_.channels, opt_.size, opt_.limits, place)
                      : codec.decode(bytes.data(), bytes.size(), opt_.channels, opt_.size, opt_.limits, place);
    if (img.empty()) img = sc.image(opt_.channels);
    t.decode += lap(Span::decode);
    resize_on_cpu(img, out, t, lap);
    return "";
  } catch (const RejectError& e) {
    return e.what();
  } catch (const cv::Exception& e) {
    return std::string("image cannot be decoded or resized: ") + e.err;
  }
}

bool SampleMaker::route(uint64_t id, const SlotOut& out, size_t tag, GpuLane& lane, const GpuLane::Deliver& deliver,
                        std::string& reason, Phases& t) const {
  thread_local std::vector<uint8_t> bytes;
  Laps lap;
  source_.read(id, bytes);
  t.read += lap(Span::read);
  bool asked = false, placed = false;
  double staging_s = 0;  // in stage(): the lane's wait and earlier samples' deliveries, counted there
  Scratch& sc = scratch();
  const ImageCodec::Placement place = [&](int width, int height) -> uint8_t* {
    asked = true;
    if (!lane.take(width, height)) return sc.place(width, height, opt_.channels);
    placed = true;
    Stopwatch ws;
    uint8_t* p = lane.stage(width, height, tag, deliver);
    staging_s = ws.seconds();
    return p;
  };
  reason.clear();
  try {
    cv::Mat img = thread_codec().decode(bytes.data(), bytes.size(), opt_.channels, opt_.size, opt_.limits, place);
    t.decode += lap(Span::decode) - staging_s;
    if (placed) return true;
    if (img.empty()) img = sc.image(opt_.channels);
    if (!asked && lane.take(img.cols, img.rows)) {
      lane.add(img.data, img.step[0], img.cols, img.rows, tag, deliver);
      return true;
    }
    lane.note_cpu(img.cols, img.rows, resize_on_cpu(img, out, t, lap));
  } catch (const RejectError& e) {
    if (placed) lane.drop_last();
    reason = e.what();
  } catch (const cv::Exception& e) {
    if (placed) lane.drop_last();
    reason = std::string("image cannot be decoded or resized: ") + e.err;
  }
  return false;
}

void SampleMaker::place_resized(const uint8_t* pixels, const SlotOut& out, Phases& t) const {
  Laps lap;
  if (out.encoded) {
    thread_codec().encode_jpeg(pixels, opt_.size, opt_.size, opt_.channels, opt_.quality, *out.encoded);
    t.encode += lap(Span::encode);
  } else {
    std::memcpy(out.raw, pixels, opt_.shape().bytes());
    t.resize += lap(Span::resize);
  }
}

double SampleMaker::resize_varied(const cv::Mat& img, const SlotOut& out, Phases& t, Laps& lap) const {
  const SideSize s = short_side_size(img.cols, img.rows, opt_.size, opt_.max_side);
  const size_t bytes = size_t(s.width) * size_t(s.height) * size_t(opt_.channels);
  if (out.pixels->size() < bytes) out.pixels->resize(bytes);
  resize_whole(img, s.width, s.height, out.pixels->data());
  out.dims[0] = uint32_t(s.height), out.dims[1] = uint32_t(s.width);
  const double resize_s = lap(Span::resize);
  t.resize += resize_s;
  if (!out.encoded) return resize_s;
  if (opt_.encoding == Encoding::jpeg) {
    thread_codec().encode_jpeg(out.pixels->data(), s.width, s.height, opt_.channels, opt_.quality, *out.encoded);
    t.encode += lap(Span::encode);
  } else {
    out.encoded->assign(out.pixels->data(), out.pixels->data() + bytes);
    t.assemble += lap(Span::assemble);
  }
  return resize_s;
}

double SampleMaker::resize_on_cpu(const cv::Mat& img, const SlotOut& out, Phases& t, Laps& lap) const {
  if (opt_.varied()) return resize_varied(img, out, t, lap);
  resize_to_square(img, opt_.size, opt_.resize, out.raw);
  const double resize_s = lap(Span::resize);
  t.resize += resize_s;
  if (out.encoded) {
    thread_codec().encode_jpeg(out.raw, opt_.size, opt_.size, opt_.channels, opt_.quality, *out.encoded);
    t.encode += lap(Span::encode);
  }
  return resize_s;
}

}  // namespace convoy::datagen
