#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Threads that flip the time-out: more of them win more of a loaded machine's CPU time. */
#define FLIPPERS 6

static volatile int stop, target = -1, touched;
static const struct timeval values[2] = {{0, 0}, {0, 1}};

/* Flips the socket's send time-out between none and one microsecond, as fast as it can. */
static void *flip(void *arg) {
    for (unsigned i = 0; !stop; i++) setsockopt(target, SOL_SOCKET, SO_SNDTIMEO, &values[i & 1], sizeof values[0]);
    return arg;
}

/* Watches the send time-out, which only this program sets (to none). */
static void *spy(void *arg) {
    while (!stop) {
        struct timeval seen;
        socklen_t len = sizeof seen;
        getsockopt(target, SOL_SOCKET, SO_SNDTIMEO, &seen, &len);
        touched |= seen.tv_sec != 0 || seen.tv_usec != 0;
    }
    return arg;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* One connect to the full listener with `threads` copies of `run` beside it; exits on anything but EAGAIN. */
static void attempt(struct sockaddr_un *addr, void *(*run)(void *), int threads) {
    target = socket(AF_UNIX, SOCK_STREAM, 0);
    /* The kernel then binds the socket at connect, after the time-out was set: a wider window for the flippers. */
    int one = 1;
    setsockopt(target, SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
    stop = 0;
    pthread_t t[FLIPPERS];
    for (int k = 0; k < threads; k++) pthread_create(&t[k], 0, run, 0);
    usleep(1000);
    int r = connect(target, (void *)addr, sizeof *addr), e = errno;
    stop = 1;
    for (int k = 0; k < threads; k++) pthread_join(t[k], 0);
    close(target);
    if (r == 0 || e != EAGAIN) {
        printf("unexpected %d\n", r ? e : 0);
        exit(1);
    }
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 5;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "/tmp/leash-race-%d.sock", getpid());
    unlink(addr.sun_path);
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    if (bind(l, (void *)&addr, sizeof addr) || listen(l, 0)) {
        perror("listen");
        return 1;
    }
    for (int i = 0; i < 64; i++) {
        int c = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (connect(c, (void *)&addr, sizeof addr) < 0) break;
    }
    /* A second process of the sandbox, to be ended with it. */
    if (fork() == 0)
        for (;;) pause();
    attempt(&addr, spy, 1);
    printf("touched %d\n", touched);
    fflush(stdout);
    int attempts = 0;
    for (double start = now(); now() - start < seconds; attempts++) attempt(&addr, flip, FLIPPERS);
    unlink(addr.sun_path);
    printf("done\n");
    fflush(stdout);
    for (;;) pause();
}
