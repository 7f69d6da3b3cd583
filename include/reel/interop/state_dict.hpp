#pragma once
// StateDict: an insertion-ordered map from name to AnyTensor, what PyTorch's state dicts are
// (an OrderedDict of tensors). The tensors are handles: a StateDict shares storage with the
// tensors put into it, as PyTorch's does.
#include "../core/config.hpp"
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "any_tensor.hpp"

namespace reel::inline REEL_ABI {

class StateDict {
 public:
  using value_type = std::pair<std::string, AnyTensor>;
  using const_iterator = std::vector<value_type>::const_iterator;

  StateDict() = default;
  StateDict(std::initializer_list<value_type> items) {
    for (const auto& [name, t] : items) insert_or_assign(name, t);
  }

  // The entry named `name`, appended (undefined) when there is none.
  AnyTensor& operator[](const std::string& name) {
    auto it = index_.find(name);
    if (it != index_.end()) return items_[it->second].second;
    index_.emplace(name, items_.size());
    items_.emplace_back(name, AnyTensor());
    return items_.back().second;
  }
  // index_error when there is no entry `name` (PyTorch: KeyError).
  const AnyTensor& at(const std::string& name) const { return items_[position(name)].second; }
  AnyTensor& at(const std::string& name) { return items_[position(name)].second; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Replaces the entry's tensor in place (its position stays), or appends it.
  void insert_or_assign(const std::string& name, AnyTensor t) { (*this)[name] = std::move(t); }
  // Removes the entry; false when there was none.
  bool erase(const std::string& name) {
    auto it = index_.find(name);
    if (it == index_.end()) return false;
    items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(it->second));
    index_.clear();
    for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
    return true;
  }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  // (read-only iteration: a name changed in place would not be found again; change entries
  // through operator[] / at / insert_or_assign)
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }
  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    k.reserve(items_.size());
    for (const auto& [name, t] : items_) k.push_back(name);
    return k;
  }

 private:
  size_t position(const std::string& name) const {
    auto it = index_.find(name);
    REEL_CHECK(it != index_.end(), index_error, "StateDict: no entry named '", name, "'");
    return it->second;
  }
  std::vector<value_type> items_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace reel
