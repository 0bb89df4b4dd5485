#define _GNU_SOURCE
#include "base/net.h"

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include "base/common.h"

int ps_net_accept(int lfd, struct sockaddr_storage *peer, socklen_t *peer_len)
{
    *peer_len = sizeof(*peer);
    for (;;) {
        int fd = accept4(lfd, (struct sockaddr *)peer, peer_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0)
            return fd;
        if (errno == EINTR)
            continue;
        /* A connection that died in the backlog is not the listener's fault. */
        if (errno == ECONNABORTED || errno == EPROTO)
            continue;
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
}

int ps_net_is_unix(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return -errno;
    return ss.ss_family == AF_UNIX;
}

int ps_net_listen_like(int like, int backlog)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int on = 0, one = 1, v6only = 0;
    socklen_t optlen = sizeof(on);
    if (getsockname(like, (struct sockaddr *)&ss, &len) < 0)
        return -errno;
    if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)
        return -ENOTSUP;
    if (getsockopt(like, SOL_SOCKET, SO_REUSEPORT, &on, &optlen) < 0 || !on)
        return -ENOTSUP;
    optlen = sizeof(v6only);
    if (ss.ss_family == AF_INET6 &&
        getsockopt(like, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &optlen) < 0)
        return -errno;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
        (ss.ss_family == AF_INET6 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)) < 0) ||
        bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, backlog) < 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    return fd;
}

int ps_net_steer_to_first(int fd, int on)
{
    /* A classic BPF program's return value is an index into the group. */
    struct sock_filter first[] = {BPF_STMT(BPF_RET | BPF_K, 0)};
    struct sock_fprog prog = {(unsigned short)PS_ARRAY_LEN(first), first};
    int unused = 0;
    int rc = on ? setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog))
                : setsockopt(fd, SOL_SOCKET, SO_DETACH_REUSEPORT_BPF, &unused, sizeof(unused));
    return rc < 0 ? -errno : 0;
}

int ps_net_set_nonblocking(int fd)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

void ps_net_tune_listener(int fd)
{
    int one = 1, defer = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer, sizeof(defer));
}

socklen_t ps_net_specific_address(int fd, struct sockaddr_storage *ss)
{
    socklen_t len = sizeof(*ss);
    if (getsockname(fd, (struct sockaddr *)ss, &len) < 0)
        return 0;
    if (ss->ss_family == AF_INET)
        return ((struct sockaddr_in *)ss)->sin_addr.s_addr != htonl(INADDR_ANY) ? len : 0;
    if (ss->ss_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)ss)->sin6_addr) ? 0 : len;
    return 0;
}

int ps_net_format_address(const struct sockaddr_storage *ss, char *text, int *port)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, text, INET6_ADDRSTRLEN);
        *port = ntohs(a->sin_port);
        return 0;
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, text, INET6_ADDRSTRLEN);
        *port = ntohs(a->sin6_port);
        return 0;
    }
    text[0] = '\0';
    *port = 0;
    return -EAFNOSUPPORT;
}

int ps_net_set_nodelay(int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
        return -errno;
    return 0;
}
