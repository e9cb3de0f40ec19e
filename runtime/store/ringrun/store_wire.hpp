// The rendezvous store's wire format (see store.hpp for the protocol), separated from the sockets so
// that the server's parser can be tested and fuzzed on plain bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ringrun::store::wire {

inline constexpr std::uint32_t kMagic = 0x31535252;  // "RRS1" little-endian
inline constexpr std::size_t kHeaderBytes = 16;

enum FrameType : unsigned char { kHello = 1, kSet = 2, kGet = 3, kReply = 4 };
enum Status : unsigned char { kStatusOk = 0, kStatusValue = 1, kStatusNotFound = 2, kStatusError = 3 };

struct Header {
  unsigned char type = 0;
  unsigned char status = 0;
  std::uint16_t key_len = 0;
  std::uint32_t value_len = 0;
  std::uint32_t timeout_ms = 0;
};

std::array<unsigned char, kHeaderBytes> encode(const Header& header);
// Parses and bounds-checks a header (values up to kMaxValueBytes once authenticated, up to
// kMaxSecretBytes before); returns an error text, or "" when the header is acceptable.
std::string decode(const unsigned char* in, bool authenticated, Header* header);
// A whole frame: header, key, value.
std::string frame(const Header& header, std::string_view key, std::string_view value);

// The frames of one connection, fed in pieces as they arrive. The body is sized only after the
// header passed decode(), so an oversized length never allocates.
class FrameReader {
 public:
  // Takes bytes from data[0, size) up to the end of the current frame; returns how many it took.
  // Takes nothing once a frame is complete (until next_frame()) or after an error.
  std::size_t feed(const char* data, std::size_t size, bool authenticated);
  bool complete() const { return complete_; }
  // Non-empty when the stream is malformed: the connection must be closed.
  const std::string& error() const { return error_; }
  const Header& header() const { return header_; }
  std::string_view key() const { return std::string_view(body_).substr(0, header_.key_len); }
  std::string_view value() const { return std::string_view(body_).substr(header_.key_len); }
  // Forgets the complete frame (and its memory) and waits for the next one.
  void next_frame();

 private:
  unsigned char head_[kHeaderBytes] = {};
  std::size_t head_got_ = 0;
  Header header_;
  std::string body_;
  std::size_t body_got_ = 0;
  bool complete_ = false;
  std::string error_;
};

}  // namespace ringrun::store::wire
