/* listener.c's EMFILE shedding, driven without a network: a unix socket in
 * a temporary directory, the process's descriptor table filled so that
 * accept() fails with EMFILE, and ps_listener_shed() giving its reserve
 * back to accept and drop one waiting connection. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "check.h"
#include "serve/listener.h"
#include "base/net.h"

static int listen_unix(char *path, size_t cap)
{
    char dir[] = "/tmp/ps-listener-XXXXXX";
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(path, cap, "%s/s", dir);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 8) < 0)
        return -1;
    return fd;
}

static int connect_unix(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
        return -1;
    return fd;
}

/* Opens descriptors until the table is full; returns how many. */
static int fill_table(int *fds, int cap)
{
    int n = 0;
    while (n < cap) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            break;
        fds[n++] = fd;
    }
    return n;
}

static void test_shedding_drops_one_waiting_connection_and_keeps_the_reserve(void)
{
    char path[128];
    int lfd = listen_unix(path, sizeof(path));
    int first = connect_unix(path), second = connect_unix(path);
    if (lfd < 0 || first < 0 || second < 0) {
        perror("test_listener: setup");
        exit(2);
    }
    int reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(reserve >= 0);

    struct rlimit saved, low;
    getrlimit(RLIMIT_NOFILE, &saved);
    low = saved;
    low.rlim_cur = 64;
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    int fds[64];
    int nfds = fill_table(fds, 64);
    struct sockaddr_storage ss;
    socklen_t len;
    CHECK_EQ(ps_net_accept(lfd, &ss, &len), -EMFILE); /* the listener would spin */

    ps_listener_shed(&reserve, lfd);
    CHECK(reserve >= 0);                              /* taken back */
    CHECK_EQ(ps_net_accept(lfd, &ss, &len), -EMFILE); /* and the table is full again */

    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    setrlimit(RLIMIT_NOFILE, &saved);

    /* The first client's connection was accepted and closed: it reads EOF. */
    char b;
    CHECK_EQ(read(first, &b, 1), 0);
    /* The second one still waits in the queue, untouched. */
    int fd = ps_net_accept(lfd, &ss, &len);
    CHECK(fd >= 0);
    CHECK_EQ(write(second, "x", 1), 1);
    CHECK_EQ(read(fd, &b, 1), 1);
    close(fd);
    close(first);
    close(second);
    close(reserve);
    close(lfd);
    unlink(path);
    *strrchr(path, '/') = '\0';
    rmdir(path);
}

/* Without a reserve (it could not be opened), shedding still accepts and
 * drops nothing it cannot: the table stays full and nothing is leaked. */
static void test_shedding_without_a_reserve_leaves_the_queue(void)
{
    char path[128];
    int lfd = listen_unix(path, sizeof(path));
    int client = connect_unix(path);
    if (lfd < 0 || client < 0) {
        perror("test_listener: setup");
        exit(2);
    }
    struct rlimit saved, low;
    getrlimit(RLIMIT_NOFILE, &saved);
    low = saved;
    low.rlim_cur = 64;
    setrlimit(RLIMIT_NOFILE, &low);
    int fds[64];
    int nfds = fill_table(fds, 64);
    int reserve = -1;
    ps_listener_shed(&reserve, lfd);
    CHECK_EQ(reserve, -1);
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    setrlimit(RLIMIT_NOFILE, &saved);
    struct sockaddr_storage ss;
    socklen_t len;
    int fd = ps_net_accept(lfd, &ss, &len);
    CHECK(fd >= 0); /* still queued */
    close(fd);
    close(client);
    close(lfd);
    unlink(path);
    *strrchr(path, '/') = '\0';
    rmdir(path);
}

int main(void)
{
    test_shedding_drops_one_waiting_connection_and_keeps_the_reserve();
    test_shedding_without_a_reserve_leaves_the_queue();
    return check_finish("test_listener");
}
