#include "program/pipeline_layout.h"

#include <cctype>
#include <sstream>

namespace parallax {

namespace {

// Bounds that keep a hostile string from expanding without limit; far above any real pipeline.
constexpr int64_t kMaxRepeat = 1'000'000;
constexpr size_t kMaxPieces = 1'000'000;

struct Piece {
  char symbol;
  int64_t count;
};

class LayoutParser {
 public:
  explicit LayoutParser(const std::string& s) : s_(s) {}

  Result<std::vector<int64_t>> parse() {
    std::vector<Piece> pieces;
    while (error_.empty() && skip() < s_.size()) {
      if (s_[pos_] == '(') {
        ++pos_;
        std::vector<Piece> group;
        while (error_.empty() && skip() < s_.size() && s_[pos_] != ')') symbol(group);
        if (error_.empty() && pos_ >= s_.size()) fail("an unclosed '('");
        if (!error_.empty()) break;
        ++pos_;
        const int64_t n = repeat();
        if (error_.empty() && group.size() * static_cast<size_t>(n) + pieces.size() > kMaxPieces) fail("more than " + std::to_string(kMaxPieces) + " pieces");
        for (int64_t i = 0; error_.empty() && i < n; ++i) pieces.insert(pieces.end(), group.begin(), group.end());
      } else {
        symbol(pieces);
      }
    }
    if (!error_.empty()) return Error{error_};
    return chunks(pieces);
  }

 private:
  size_t skip() {
    while (pos_ < s_.size() && (s_[pos_] == ',' || std::isspace(static_cast<unsigned char>(s_[pos_])))) ++pos_;
    return pos_;
  }

  void fail(const std::string& what) {
    if (error_.empty()) error_ = "has " + what + " at position " + std::to_string(pos_) + " of \"" + s_ + "\"";
  }

  // One of E t L | m, with an optional *N.
  void symbol(std::vector<Piece>& out) {
    const char c = s_[pos_];
    if (c == 'm') return fail("an MTP layer 'm', which Parallax does not price,");
    if (c != 'E' && c != 't' && c != 'L' && c != '|') return fail(std::string("'") + c + "' (not E, t, L, |, ( or ))");
    ++pos_;
    out.push_back({c, repeat()});
  }

  // "*N" after a symbol or group; 1 when absent.
  int64_t repeat() {
    if (skip() >= s_.size() || s_[pos_] != '*') return 1;
    ++pos_;
    int64_t n = 0;
    const size_t start = skip();
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_])) && n <= kMaxRepeat)
      n = n * 10 + (s_[pos_++] - '0');
    if (pos_ == start) fail("'*' without a count");
    else if (n > kMaxRepeat) fail("a repeat above " + std::to_string(kMaxRepeat));
    return n;
  }

  Result<std::vector<int64_t>> chunks(const std::vector<Piece>& pieces) {
    std::vector<int64_t> layers{0};
    int64_t loss_chunk = -1;
    for (const Piece& p : pieces) {
      if (p.symbol == '|') {
        layers.resize(layers.size() + static_cast<size_t>(p.count), 0);
        if (layers.size() > kMaxPieces) return Error{"has more than " + std::to_string(kMaxPieces) + " chunks"};
      } else if (p.symbol == 't') {
        if (layers.back() > kMaxRepeat * 1000 - p.count) return Error{"has a chunk of more than 10^9 layers"};
        layers.back() += p.count;
      } else if (p.symbol == 'E' && (layers.size() != 1 || p.count != 1)) {
        return Error{"the embedding 'E' belongs once in the first chunk of \"" + s_ + "\""};
      } else if (p.symbol == 'L') {
        if (loss_chunk >= 0 || p.count != 1) return Error{"the loss 'L' appears more than once in \"" + s_ + "\""};
        loss_chunk = static_cast<int64_t>(layers.size()) - 1;
      }
    }
    if (loss_chunk >= 0 && loss_chunk != static_cast<int64_t>(layers.size()) - 1)
      return Error{"the loss 'L' belongs in the last chunk of \"" + s_ + "\""};
    return layers;
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::string error_;
};

std::string layers_string(int64_t n) { return n <= 3 ? std::string(static_cast<size_t>(n), 't') : "t*" + std::to_string(n); }

}  // namespace

Result<std::vector<int64_t>> parse_megatron_layout(const std::string& layout) { return LayoutParser(layout).parse(); }

std::string megatron_layout_string(const std::vector<int64_t>& chunk_layers) {
  if (chunk_layers.empty()) return "";
  const size_t n = chunk_layers.size();
  std::ostringstream out;
  out << 'E' << layers_string(chunk_layers[0]);
  bool closed = false;  // a repeated group ends with its own '|'
  for (size_t i = 1; i + 1 < n;) {
    size_t run = 1;
    while (i + run + 1 < n && chunk_layers[i + run] == chunk_layers[i]) ++run;
    if (!closed) out << '|';
    closed = run > 1;
    if (closed) out << '(' << layers_string(chunk_layers[i]) << "|)*" << run;
    else out << layers_string(chunk_layers[i]);
    i += run;
  }
  if (n > 1) out << (closed ? "" : "|") << layers_string(chunk_layers[n - 1]);
  out << 'L';
  return out.str();
}

}  // namespace parallax
