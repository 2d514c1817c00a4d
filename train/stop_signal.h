// SIGINT and SIGTERM during training: the handler only records the signal; the loop reads it after
// each step, writes the checkpoint and exits with 128 + the signal.
#pragma once

namespace convoy {

// Sends both signals to the handler, which only records them.
void catch_stop_signals();
void clear_stop_signal();
int stop_signal();  // the last signal caught since clear_stop_signal(), 0: none

}  // namespace convoy
