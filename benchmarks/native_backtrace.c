/* Native frames of a crash on the GPU machine, which has no gdb: preloaded
 * (LD_PRELOAD) into a process, it prints the backtrace of a SIGSEGV, SIGBUS
 * or SIGABRT (glibc's "free(): invalid pointer" aborts) with each frame's
 * library and offset, so `addr2line -e LIB OFFSET` names the line. Built and
 * used by benchmarks/h200_session.sh (stage export):
 *
 *   gcc -shared -fPIC -O1 -o native_backtrace.so benchmarks/native_backtrace.c -ldl
 *   LD_PRELOAD=$PWD/native_backtrace.so python3 ...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* write(2) only: the handler runs in a crashed process, where stdio may hold broken locks. */
static void emit(const char* line, int len) {
  if (len > 0 && write(STDERR_FILENO, line, (size_t)len) < 0) _exit(1);
}

static void print_frames(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  char line[512];
  int len = snprintf(line, sizeof line, "native_backtrace: signal %d (%s), %d frames\n", sig, strsignal(sig), n);
  emit(line, len);
  for (int i = 0; i < n; ++i) {
    Dl_info info;
    memset(&info, 0, sizeof info);
    if (dladdr(frames[i], &info) && info.dli_fname) {
      len = snprintf(line, sizeof line, "  #%-2d %s +0x%lx %s\n", i, info.dli_fname,
                     (unsigned long)((char*)frames[i] - (char*)info.dli_fbase), info.dli_sname ? info.dli_sname : "?");
    } else {
      len = snprintf(line, sizeof line, "  #%-2d %p\n", i, frames[i]);
    }
    emit(line, len);
  }
}

static void on_crash(int sig) {
  print_frames(sig);
  signal(sig, SIG_DFL);   /* then die as the signal would have */
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  signal(SIGSEGV, on_crash);
  signal(SIGBUS, on_crash);
  signal(SIGABRT, on_crash);
}
