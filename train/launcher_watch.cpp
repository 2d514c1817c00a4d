// PMIx calls its event handlers in order, those for one status before Open MPI's catch-all
// default, and a handler that reports PMIX_EVENT_ACTION_COMPLETE ends the chain.
#include "train/launcher_watch.h"

#include <pmix.h>
#include <unistd.h>

#include <csignal>

#include "train/stop_signal.h"

namespace convoy {
namespace {

// A rank left without its launcher has this long to reach its checkpoint and exit; then SIGALRM
// ends it, so that none lingers (in a collective whose peer is gone, say) with nobody to end it.
constexpr unsigned kOrphanSeconds = 60;

extern "C" void on_lost_launcher(size_t, pmix_status_t, const pmix_proc_t*, pmix_info_t*, size_t, pmix_info_t*, size_t,
                                 pmix_event_notification_cbfunc_fn_t done, void* done_data) {
  alarm(kOrphanSeconds);
  record_stop(SIGTERM);
  if (done) done(PMIX_EVENT_ACTION_COMPLETE, nullptr, 0, nullptr, nullptr, done_data);
}

}  // namespace

LauncherWatch::LauncherWatch() {
  if (!PMIx_Initialized()) return;
  pmix_proc_t me;
  if (PMIx_Init(&me, nullptr, 0) != PMIX_SUCCESS) return;
  pmix_status_t lost = PMIX_ERR_LOST_CONNECTION;
  // Without a callback the registration is synchronous and returns the handler's reference.
  const pmix_status_t ref = PMIx_Register_event_handler(&lost, 1, nullptr, 0, on_lost_launcher, nullptr, nullptr);
  if (ref < 0) {
    PMIx_Finalize(nullptr, 0);
    return;
  }
  handler_ = size_t(ref);
  active_ = true;
}

LauncherWatch::~LauncherWatch() {
  if (!active_) return;
  PMIx_Deregister_event_handler(handler_, nullptr, nullptr);
  PMIx_Finalize(nullptr, 0);
}

}  // namespace convoy
