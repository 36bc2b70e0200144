// SeriesLabels: a series' labels as the reader keeps them, sorted by name:
// one block of text ("name\0value\0" for each label) with its length and
// label count, read as (name, value) views of it. A label list of vectors of
// string pairs cost about 64 bytes a label before its text, and a heap block
// for each name or value longer than 15 bytes (most label names are); this
// is one block of the text alone.
//
// The text's byte order is the order of the label lists as lists of pairs
// (a name or value holds no NUL, so one that is a prefix of another sorts
// first, as a string does).
//
// Internal (docs/api.md): part of the reader's SeriesInfo.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gym {

class SeriesLabels {
 public:
  using value_type = std::pair<std::string_view, std::string_view>;

  // Forward iteration; each label is read from the text (no copy).
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = SeriesLabels::value_type;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = value_type;

    iterator() = default;
    explicit iterator(const char* p) : p_(p) {}
    value_type operator*() const {
      const std::string_view name(p_);
      return {name, std::string_view(p_ + name.size() + 1)};
    }
    iterator& operator++() {
      p_ += std::strlen(p_) + 1;
      p_ += std::strlen(p_) + 1;
      return *this;
    }
    iterator operator++(int) {
      iterator was = *this;
      ++*this;
      return was;
    }
    bool operator==(const iterator&) const = default;

   private:
    const char* p_ = nullptr;
  };

  SeriesLabels() = default;
  // From (name, value) pairs, sorted by name by the caller.
  template <class Pairs>
  static SeriesLabels from(const Pairs& pairs) {
    std::string text;
    uint32_t count = 0;
    for (const auto& [name, value] : pairs) {
      text.append(name).push_back('\0');
      text.append(value).push_back('\0');
      ++count;
    }
    return SeriesLabels(text, count);
  }
  // From text as text() gives it, of `count` labels (the caller has
  // checked its form: 2 * count NUL-terminated parts).
  static SeriesLabels from_text(std::string_view text, uint32_t count) {
    return SeriesLabels(text, count);
  }
  SeriesLabels(const SeriesLabels& other) : SeriesLabels(other.text(), other.count_) {}
  SeriesLabels& operator=(const SeriesLabels& other) {
    if (this != &other) *this = SeriesLabels(other);
    return *this;
  }
  // A moved-from SeriesLabels has no labels.
  SeriesLabels(SeriesLabels&& other) noexcept
      : text_(std::move(other.text_)),
        bytes_(std::exchange(other.bytes_, 0)),
        count_(std::exchange(other.count_, 0)) {}
  SeriesLabels& operator=(SeriesLabels&& other) noexcept {
    text_ = std::move(other.text_);
    bytes_ = std::exchange(other.bytes_, 0);
    count_ = std::exchange(other.count_, 0);
    return *this;
  }

  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  iterator begin() const { return iterator(text_.get()); }
  iterator end() const { return iterator(text_.get() + bytes_); }
  // The i-th label (i < size()), found by walking the text.
  value_type operator[](size_t i) const { return *std::next(begin(), std::ptrdiff_t(i)); }
  // "name\0value\0" for each label.
  std::string_view text() const { return {text_.get(), bytes_}; }

  friend bool operator==(const SeriesLabels& a, const SeriesLabels& b) {
    return a.count_ == b.count_ && a.text() == b.text();
  }
  friend std::strong_ordering operator<=>(const SeriesLabels& a, const SeriesLabels& b) {
    return a.text() <=> b.text();
  }
  // Against (name, value) pairs of any string types.
  template <class A, class B>
  friend bool operator==(const SeriesLabels& a, const std::vector<std::pair<A, B>>& b) {
    if (a.size() != b.size()) return false;
    auto it = a.begin();
    for (const auto& [name, value] : b) {
      const auto [n, v] = *it++;
      if (n != std::string_view(name) || v != std::string_view(value)) return false;
    }
    return true;
  }

 private:
  SeriesLabels(std::string_view text, uint32_t count)
      : text_(text.empty() ? nullptr : new char[text.size()]),
        bytes_(static_cast<uint32_t>(text.size())),
        count_(count) {
    if (!text.empty()) std::memcpy(text_.get(), text.data(), text.size());
  }
  std::unique_ptr<char[]> text_;
  uint32_t bytes_ = 0;
  uint32_t count_ = 0;
};

}  // namespace gym
