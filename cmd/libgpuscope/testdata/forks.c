// forks forks 40 children while threads allocate and free through
// libgpuscope, as a Python server that forks workers under PyTorch does;
// each child calls the library, which must fail at once with a message
// (the child of a fork has no Go runtime threads, and locks other threads
// held at the fork stay held there), and exits. It prints "ok" and exits 0
// where every child returned, its calls failed, and none hung: a child
// still running after 20 s is killed (SIGALRM) and counted. cmd/libgpuscope's
// TestForkedChildrenFailClearly runs it.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpuscope.h"

enum { threads = 4, children = 40 };

static volatile int stop;

static void *allocate(void *arg) {
	void *stream = (void *)(uintptr_t)arg;
	int64_t s = gpuscope_scope_begin(0, "busy");
	while (!stop) {
		void *p[8];
		for (int k = 0; k < 8; k++) {
			p[k] = gpuscope_alloc(512 << k, 0, stream);
		}
		for (int k = 0; k < 8; k++) {
			gpuscope_free(p[k], 512 << k, 0, stream);
		}
		char buf[256];
		gpuscope_stats(0, buf, sizeof buf);
	}
	gpuscope_scope_end(s, GPUSCOPE_FREE_LIVE);
	return NULL;
}

// child is what a forked child does: every call fails, with its message.
static int child(void) {
	alarm(20); // a hang is a death by SIGALRM, which the parent counts
	if (gpuscope_alloc(4096, 0, NULL) != NULL) {
		return 2;
	}
	char msg[1024];
	int kind = 0;
	if (gpuscope_last_error(msg, sizeof msg, &kind) == 0 || kind != GPUSCOPE_FAILED || strstr(msg, "fork") == NULL) {
		return 3;
	}
	if (gpuscope_scope_begin(0, "child") >= 0 || gpuscope_cupy_malloc(0, 4096, 0) != 0) {
		return 4;
	}
	// Flags it does not know are no reason to enter Go either.
	if (gpuscope_scope_begin_flags(0, "child", 2) >= 0 || gpuscope_scope_sleep(1, 0) == 0 || gpuscope_scope_wake(1) == 0) {
		return 7;
	}
	char stats[1024];
	gpuscope_stats(0, stats, sizeof stats);
	if (strstr(stats, "\"error\":") == NULL) {
		return 5;
	}
	// A free of the parent's memory (a forked worker dropping a tensor it
	// inherited) returns, quietly, and says why in the thread's error.
	gpuscope_free((void *)(uintptr_t)0x7000000, 4096, 0, NULL);
	if (gpuscope_last_error(msg, sizeof msg, &kind) == 0 || strstr(msg, "gpuscope_free") == NULL) {
		return 6;
	}
	return 0;
}

int main(void) {
	pthread_t t[threads];
	for (int i = 0; i < threads; i++) {
		pthread_create(&t[i], NULL, allocate, (void *)(uintptr_t)(i % 2 ? 0x5000 : 0));
	}
	int failed = 0;
	pid_t pids[children];
	for (int i = 0; i < children; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			_exit(child());
		}
		if (pids[i] < 0) {
			perror("fork");
			failed++;
		}
		usleep(1000); // the threads allocate between the forks
	}
	for (int i = 0; i < children; i++) {
		int status = 0;
		if (pids[i] <= 0 || waitpid(pids[i], &status, 0) < 0) {
			continue;
		}
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			printf("FAIL: child %d: %s %d\n", i, WIFEXITED(status) ? "exited" : "killed by signal",
			       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
			failed++;
		}
	}
	stop = 1;
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
	}
	char buf[4096];
	gpuscope_stats(0, buf, sizeof buf);
	if (strstr(buf, "\"active_blocks\":0,") == NULL) {
		printf("FAIL: the parent's threads left memory live: %s\n", buf);
		failed++;
	}
	printf(failed ? "%d children failed\n" : "ok\n", failed);
	fflush(stdout);
	return failed > 0;
}
