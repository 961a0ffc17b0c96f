// Process signal handling for the daemons. Clean shutdown: block SIGINT and
// SIGTERM in every thread (call before starting any), then wait for one on
// the main thread, which then stops the service in order instead of dying
// mid-write. Broken pipes: a write to a socket whose peer died must come back
// as an EPIPE error that the caller reports (a collective as ABORTED), not
// as SIGPIPE, whose default action kills the whole process. Reloading: SIGHUP
// waited for the same way, by a daemon that rereads a file on it.
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

// Reloading: a daemon that rereads a file on SIGHUP blocks it with the
// shutdown signals (before any thread starts), then waits for any of them.
inline sigset_t ShutdownAndReloadSignals() {
  sigset_t signals = ShutdownSignals();
  sigaddset(&signals, SIGHUP);
  return signals;
}

inline void BlockShutdownAndReloadSignals() {
  sigset_t signals = ShutdownAndReloadSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

// Waits until SIGINT, SIGTERM or SIGHUP arrives; returns the signal number.
inline int WaitForShutdownOrReloadSignal() {
  sigset_t signals = ShutdownAndReloadSignals();
  int sig = 0;
  sigwait(&signals, &sig);
  return sig;
}

// Ignores SIGPIPE process-wide (idempotent, safe from any thread).
inline void IgnoreBrokenPipeSignals() { signal(SIGPIPE, SIG_IGN); }

}  // namespace tessera

#endif  // TESSERA_COMMON_SHUTDOWN_SIGNAL_H_
