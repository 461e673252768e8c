// NCCL_SOCKET_IFNAME for the stand-in NCCL (nccl_iface.h): the first interface, in the
// order getifaddrs lists them, that has an IPv4 address and that the variable selects.
#include "nccl_iface.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

namespace standin::nccl {

namespace {

// Whether interface `name` is selected by NCCL_SOCKET_IFNAME's `spec`.
bool selected(const std::string& name, std::string spec) {
    bool exclude = false, exact = false;
    if (!spec.empty() && spec[0] == '^') {
        exclude = true;
        spec.erase(0, 1);
    }
    if (!spec.empty() && spec[0] == '=') {
        exact = true;
        spec.erase(0, 1);
    }
    bool listed = false;
    size_t start = 0;
    while (start <= spec.size()) {
        const size_t comma = spec.find(',', start);
        const std::string item = spec.substr(start, comma - start);
        if (!item.empty()) listed |= exact ? name == item : name.compare(0, item.size(), item) == 0;
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return exclude ? !listed : listed;
}

}  // namespace

bool hub_address(uint32_t* address, std::string* why) {
    const char* spec = std::getenv("NCCL_SOCKET_IFNAME");
    if (spec == nullptr || *spec == '\0') {
        *address = htonl(INADDR_LOOPBACK);
        return true;
    }
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) {
        *why = std::string("getifaddrs: ") + std::strerror(errno);
        return false;
    }
    bool found = false;
    std::vector<std::string> seen;
    for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
        if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
        seen.push_back(i->ifa_name);
        if (!selected(i->ifa_name, spec)) continue;
        *address = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
        found = true;
    }
    freeifaddrs(list);
    if (!found) {
        std::string names;
        for (const std::string& n : seen) names += (names.empty() ? "" : ", ") + n;
        *why = std::string("NCCL_SOCKET_IFNAME=\"") + spec +
               "\" selects no interface with an IPv4 address (this machine has: " + names + ")";
    }
    return found;
}

std::string address_text(uint32_t address) {
    char text[INET_ADDRSTRLEN] = "?";
    in_addr a{};
    a.s_addr = address;
    inet_ntop(AF_INET, &a, text, sizeof text);
    return text;
}

}  // namespace standin::nccl
