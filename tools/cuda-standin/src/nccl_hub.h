// The hub of one clique (the ranks sharing a unique id): the stand-in's counterpart of
// NCCL's bootstrap root, started by ncclGetUniqueId in the calling process (rank 0's, in
// ditto) and listening on a loopback port that the id carries.
//
// Every rank connects and says Hello; once all `nranks` have, each gets a Welcome. A
// collective is every rank posting its bytes; when all have, the hub sends each rank
// all of them in rank order, and each rank computes its result from the same bytes in
// the same order, so a sum is the same on every rank and every run. Sends are
// forwarded to their receiver in the order they were issued (NCCL pairs a send and a
// receive between two ranks in order). The hub only moves bytes; the arithmetic is the
// ranks' (nccl.cpp), the same code whether ranks are threads or processes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace standin::nccl {

// Starts a hub for a new clique with key `key`, listening on `address` (network byte
// order, nccl_iface.h); its port, or 0 when no socket could be opened (`*why` says why). The hub stops accepting once every rank joined, or after the
// safety valve if some never did, and ends when every rank has left.
uint16_t start_hub(uint64_t key, uint32_t address, std::string* why);

// Waits (until `deadline`) until every hub this process runs has seen every rank leave
// and has written out every frame it queued; called when the process exits. A hub lives
// in the process that made the unique id (rank 0's), so that process exiting earlier
// would take with it the frames still on their way to slower peers: its own last sends,
// unread at the hub, and, because closing a socket with unread input resets the
// connection, what a peer had received but not yet read. A real NCCL rank that exits
// after its stream finished takes nothing from its peers.
void drain_hubs(std::chrono::steady_clock::time_point deadline);

}  // namespace standin::nccl
