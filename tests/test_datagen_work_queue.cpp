// The work queue: samples of begun files before the next beginning, in file and slot order; a
// waiter flushes once before it waits and is released by the samples of a file being begun or by
// stop(); with several threads every planned sample is handed out exactly once.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "datagen/work_queue.h"

using namespace convoy::datagen;
using Item = WorkQueue::Item;
using namespace std::chrono_literals;

TEST(WorkQueue, SamplesOfBegunFilesComeBeforeTheNextBeginning) {
  WorkQueue q(2);
  Item i = q.next();
  ASSERT_EQ(i.kind, Item::begin);
  EXPECT_EQ(i.file, 0u);
  q.begun(0, 3);
  for (size_t slot = 0; slot < 3; ++slot) {
    i = q.next();
    ASSERT_EQ(i.kind, Item::sample);
    EXPECT_EQ(i.file, 0u);
    EXPECT_EQ(i.slot, slot);
  }
  i = q.next();
  ASSERT_EQ(i.kind, Item::begin);
  EXPECT_EQ(i.file, 1u);
  q.begun(1, 0);  // kept: nothing to make
  EXPECT_EQ(q.next().kind, Item::none);
}

TEST(WorkQueue, AWaiterGetsTheSamplesOfTheFileBeingBegun) {
  WorkQueue q(1);
  ASSERT_EQ(q.next().kind, Item::begin);
  auto waiter = std::async(std::launch::async, [&] { return q.next(); });
  EXPECT_EQ(waiter.wait_for(100ms), std::future_status::timeout);  // file 0 may still bring samples
  q.begun(0, 1);
  const Item i = waiter.get();
  EXPECT_EQ(i.kind, Item::sample);
  EXPECT_EQ(i.file, 0u);
  EXPECT_EQ(q.next().kind, Item::none);
}

// Before it would wait, next() runs the caller's flush once, without the lock (the flush may
// itself begin work: here it hands out the file being begun), then looks again.
TEST(WorkQueue, AWaiterFlushesOnceBeforeItWaits) {
  WorkQueue q(2);
  ASSERT_EQ(q.next().kind, Item::begin);
  int flushes = 0;
  EXPECT_EQ(q.next([&] { ++flushes; }).kind, Item::begin);  // file 1: no wait, no flush
  EXPECT_EQ(flushes, 0);
  const Item i = q.next([&] {
    ++flushes;
    q.begun(1, 1);  // what the flush finished makes a sample to hand out
  });
  EXPECT_EQ(flushes, 1);
  EXPECT_EQ(i.kind, Item::sample);
  EXPECT_EQ(i.file, 1u);
  auto waiter = std::async(std::launch::async, [&] { return q.next([&] { ++flushes; }); });
  EXPECT_EQ(waiter.wait_for(100ms), std::future_status::timeout);  // file 0 is still being begun
  q.begun(0, 0);
  EXPECT_EQ(waiter.get().kind, Item::none);
  EXPECT_EQ(flushes, 2);
}

TEST(WorkQueue, StopReleasesWaitersAndEndsTheWork) {
  WorkQueue q(3);
  ASSERT_EQ(q.next().kind, Item::begin);
  ASSERT_EQ(q.next().kind, Item::begin);
  ASSERT_EQ(q.next().kind, Item::begin);
  auto waiter = std::async(std::launch::async, [&] { return q.next(); });
  EXPECT_EQ(waiter.wait_for(100ms), std::future_status::timeout);
  q.stop();
  EXPECT_EQ(waiter.get().kind, Item::none);
  q.begun(0, 5);
  EXPECT_EQ(q.next().kind, Item::none);
}

TEST(WorkQueue, ManyThreadsGetEverySampleOnce) {
  constexpr size_t kFiles = 40;
  auto samples_of = [](size_t file) { return file % 5 == 3 ? 0 : 1 + file * 7 % 13; };  // some kept
  WorkQueue q(kFiles);
  std::mutex mu;
  std::multiset<std::pair<size_t, size_t>> got;
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&] {
      for (Item i = q.next(); i.kind != Item::none; i = q.next()) {
        if (i.kind == Item::begin) {
          std::this_thread::sleep_for(1ms);  // beginning takes a while: others must wait, not leave
          q.begun(i.file, samples_of(i.file));
        } else {
          std::lock_guard<std::mutex> lock(mu);
          got.insert({i.file, i.slot});
        }
      }
    });
  for (auto& t : threads) t.join();
  std::multiset<std::pair<size_t, size_t>> want;
  for (size_t f = 0; f < kFiles; ++f)
    for (size_t s = 0; s < samples_of(f); ++s) want.insert({f, s});
  EXPECT_EQ(got, want);
}
