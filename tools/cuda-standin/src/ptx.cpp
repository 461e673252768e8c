// A reader for the few PTX directives the stand-in needs (see ptx.h).
#include "ptx.h"

#include <cctype>
#include <cstdlib>
#include <sstream>

namespace standin {
namespace {

// `text` with // and /* */ comments replaced by spaces.
std::string without_comments(const std::string& text) {
    std::string out = text;
    size_t i = 0;
    while (i + 1 < out.size()) {
        if (out[i] == '/' && out[i + 1] == '/') {
            while (i < out.size() && out[i] != '\n') out[i++] = ' ';
        } else if (out[i] == '/' && out[i + 1] == '*') {
            while (i + 1 < out.size() && !(out[i] == '*' && out[i + 1] == '/')) out[i++] = ' ';
            if (i + 1 < out.size()) out[i] = out[i + 1] = ' ';
        } else {
            ++i;
        }
    }
    return out;
}

bool is_word_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '$' || c == '.';
}

// The position of directive `word` (e.g. ".entry") as a whole token at or after `from`.
size_t find_directive(const std::string& s, const std::string& word, size_t from) {
    for (size_t at = s.find(word, from); at != std::string::npos; at = s.find(word, at + 1)) {
        const bool starts = at == 0 || !is_word_char(s[at - 1]);
        const size_t end = at + word.size();
        const bool ends = end >= s.size() || !is_word_char(s[end]);
        if (starts && ends) return at;
    }
    return std::string::npos;
}

size_t type_size(const std::string& type) {
    static const char* const sizes[][2] = {
        {".b8", "1"},   {".u8", "1"},   {".s8", "1"},  {".b16", "2"}, {".u16", "2"}, {".s16", "2"},
        {".f16", "2"},  {".bf16", "2"}, {".b32", "4"}, {".u32", "4"}, {".s32", "4"}, {".f32", "4"},
        {".b64", "8"},  {".u64", "8"},  {".s64", "8"}, {".f64", "8"}, {".b128", "16"},
    };
    for (const auto& entry : sizes) {
        if (type == entry[0]) return static_cast<size_t>(std::atoi(entry[1]));
    }
    return 0;
}

// One `.param` declaration, e.g. ".param .align 8 .b8 k_param_2[72]".
bool parse_param(const std::string& decl, PtxParam* out, std::string* error) {
    std::istringstream words(decl);
    std::string word;
    size_t align = 0, elem = 0, count = 1;
    bool seen_param = false;
    while (words >> word) {
        if (word == ".param") {
            seen_param = true;
        } else if (word == ".align") {
            words >> word;
            align = static_cast<size_t>(std::atoi(word.c_str()));
        } else if (type_size(word) != 0) {
            elem = type_size(word);
        } else if (word[0] != '.') {
            const size_t bracket = word.find('[');
            if (bracket != std::string::npos) count = static_cast<size_t>(std::atoi(word.c_str() + bracket + 1));
        }  // other qualifiers (.ptr, .global, ...) do not change the size
    }
    if (!seen_param || elem == 0 || count == 0) {
        *error = "cannot read the parameter declaration \"" + decl + "\"";
        return false;
    }
    out->size = elem * count;
    out->align = align != 0 ? align : elem;
    return true;
}

// The three numbers after a directive such as ".maxntid 256, 1, 1".
void read_triple(const std::string& s, size_t at, unsigned out[3]) {
    const char* p = s.c_str() + at;
    for (int i = 0; i < 3; ++i) {
        while (*p != '\0' && std::isdigit(static_cast<unsigned char>(*p)) == 0 && *p != '{' && *p != '.') ++p;
        out[i] = std::isdigit(static_cast<unsigned char>(*p)) != 0 ? static_cast<unsigned>(std::strtoul(p, nullptr, 10)) : 1;
        while (std::isdigit(static_cast<unsigned char>(*p)) != 0) ++p;
    }
}

bool parse_entry(const std::string& s, size_t at, PtxEntry* entry, size_t* next, std::string* error) {
    size_t p = at + 6;  // past ".entry"
    while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p])) != 0) ++p;
    const size_t name_start = p;
    while (p < s.size() && is_word_char(s[p])) ++p;
    entry->name = s.substr(name_start, p - name_start);
    const size_t open = s.find('(', p);
    const size_t close = open == std::string::npos ? open : s.find(')', open);
    if (entry->name.empty() || close == std::string::npos) {
        *error = "cannot read the .entry at offset " + std::to_string(at);
        return false;
    }
    const std::string list = s.substr(open + 1, close - open - 1);
    size_t start = 0;
    while (start < list.size()) {
        size_t comma = list.find(',', start);
        if (comma == std::string::npos) comma = list.size();
        const std::string decl = list.substr(start, comma - start);
        if (decl.find_first_not_of(" \t\r\n") != std::string::npos) {
            PtxParam param{};
            if (!parse_param(decl, &param, error)) {
                *error = entry->name + ": " + *error;
                return false;
            }
            entry->params.push_back(param);
        }
        start = comma + 1;
    }
    // Performance directives sit between the parameter list and the body.
    size_t body = s.find_first_of("{;", close);
    if (body == std::string::npos) body = s.size();
    const std::string between = s.substr(close, body - close);
    const size_t maxntid = find_directive(between, ".maxntid", 0);
    if (maxntid != std::string::npos) {
        unsigned t[3];
        read_triple(between, maxntid + 8, t);
        entry->max_threads = t[0] * t[1] * t[2];
    }
    const size_t reqntid = find_directive(between, ".reqntid", 0);
    if (reqntid != std::string::npos) read_triple(between, reqntid + 8, entry->req_ntid);
    *next = body;
    return true;
}

}  // namespace

bool parse_ptx(const std::string& text, PtxModule* out, std::string* error) {
    const std::string s = without_comments(text);
    const size_t version = find_directive(s, ".version", 0);
    if (version == std::string::npos) {
        *error = "no .version directive: not PTX";
        return false;
    }
    const char* v = s.c_str() + version + 8;
    char* end = nullptr;
    out->version_major = static_cast<int>(std::strtol(v, &end, 10));
    out->version_minor = *end == '.' ? static_cast<int>(std::strtol(end + 1, nullptr, 10)) : 0;
    const size_t target = find_directive(s, ".target", 0);
    if (target != std::string::npos) {
        const size_t sm = s.find("sm_", target);
        if (sm != std::string::npos && sm < s.find('\n', target)) out->target_sm = std::atoi(s.c_str() + sm + 3);
    }
    for (size_t at = find_directive(s, ".entry", 0); at != std::string::npos;) {
        PtxEntry entry;
        size_t next = at;
        if (!parse_entry(s, at, &entry, &next, error)) return false;
        out->entries.push_back(entry);
        at = find_directive(s, ".entry", next);
    }
    return true;
}

}  // namespace standin
