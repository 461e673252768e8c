// Which address the stand-in NCCL's hub listens on, and the ranks dial: the IPv4
// address of the interface NCCL_SOCKET_IFNAME selects, as NCCL picks the interface for
// its bootstrap and data sockets; loopback when the variable is unset (one machine).
#pragma once

#include <cstdint>
#include <string>

namespace standin::nccl {

// The address (network byte order) for the hub, or false and `*why` when
// NCCL_SOCKET_IFNAME names no interface that has an IPv4 address. The variable has
// NCCL's syntax: a comma list of interface name prefixes ("eth,ib"), "=" in front for
// exact names ("=eth0"), "^" in front to exclude the listed ones instead ("^docker,lo").
bool hub_address(uint32_t* address, std::string* why);

// `address` (network byte order) as dotted text.
std::string address_text(uint32_t address);

}  // namespace standin::nccl
