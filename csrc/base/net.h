/* Sockets: accepting connections and setting their options. */
#ifndef PS_NET_H
#define PS_NET_H

#include <sys/socket.h>

/* Accepts one connection as non-blocking and close-on-exec.
 * Returns the fd or -errno (-EAGAIN when none is waiting). */
int ps_net_accept(int lfd, struct sockaddr_storage *peer, socklen_t *peer_len);
/* Returns 1 when fd is an AF_UNIX socket, 0 when not, -errno on error. */
int ps_net_is_unix(int fd);
int ps_net_set_nonblocking(int fd);
/* Writes the IP address of an AF_INET/AF_INET6 address into text (room for
 * INET6_ADDRSTRLEN) and its port into *port. Returns 0, or -EAFNOSUPPORT
 * for other families (text is then ""). */
int ps_net_format_address(const struct sockaddr_storage *ss, char *text, int *port);
/* TCP listener options every accepted connection inherits (TCP_NODELAY), and
 * TCP_DEFER_ACCEPT so that accept returns once the request has arrived.
 * Failures are ignored: both are optimisations. */
void ps_net_tune_listener(int fd);
/* The address fd is bound to, when it is a specific one (not a wildcard):
 * returns its length, or 0. */
socklen_t ps_net_specific_address(int fd, struct sockaddr_storage *ss);
int ps_net_set_nodelay(int fd);
/* --reuse-port: another listening socket in the SO_REUSEPORT group of the
 * TCP listener `like` (same address, same IPV6_V6ONLY), non-blocking and
 * close-on-exec. Returns the new fd, -ENOTSUP when `like` is not a TCP
 * socket with SO_REUSEPORT set, or -errno. */
int ps_net_listen_like(int like, int backlog);
/* Steers every new connection of fd's SO_REUSEPORT group to the group's
 * first socket (on), or back to the kernel's hash (off). Returns 0 or -errno. */
int ps_net_steer_to_first(int fd, int on);

#endif
