// Clean shutdown for the daemons: block SIGINT and SIGTERM in every thread
// (call before starting any), then wait for one on the main thread, which
// then stops the service in order instead of dying mid-write.
#ifndef TESSERA_COMMON_SHUTDOWN_SIGNAL_H_
#define TESSERA_COMMON_SHUTDOWN_SIGNAL_H_

#include <signal.h>

namespace tessera {

inline sigset_t ShutdownSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  return signals;
}

// Blocks the shutdown signals in the calling thread and the threads it starts.
inline void BlockShutdownSignals() {
  sigset_t signals = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

// Waits until SIGINT or SIGTERM arrives; returns the signal number.
inline int WaitForShutdownSignal() {
  sigset_t signals = ShutdownSignals();
  int sig = 0;
  sigwait(&signals, &sig);
  return sig;
}

}  // namespace tessera

#endif  // TESSERA_COMMON_SHUTDOWN_SIGNAL_H_
