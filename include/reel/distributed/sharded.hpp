#pragma once
// Sharded checkpoints on reel::distributed, in Hugging Face's sharded safetensors layout:
// each rank of a group writes its shard to <prefix>-0000k-of-0000W.safetensors (k = rank + 1)
// and the group's first rank writes <prefix>.safetensors.index.json,
// {"metadata": {"total_size": bytes}, "weight_map": {name: shard file}}. load_sharded reads them
// all back into one StateDict on any number of ranks, or in a program without MPI's world (it is
// not a collective), so a run resumes on another world size. (The rank-0 kind: rank 0 saves a
// replicated state with save / save_safetensors, every rank loads it.)
//
// Not in <reel/distributed.hpp>: like <reel/io/safetensors.hpp>, it needs nlohmann/json.
//
//   auto sd = model.state_dict();                     // the same on every rank (DDP)
//   distributed::save_sharded("ck/model", distributed::shard_of(sd, rank(), world_size()));
//   model.load_state_dict(distributed::load_sharded("ck/model"));   // any world size
#include "../io/safetensors.hpp"
#include "collectives.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace reel::inline REEL_ABI::distributed::inline REEL_DIST_ABI {

// Rank `rank`'s part of a state dict that every rank holds (of `world` ranks): the entries dealt
// largest first, each to the rank with the fewest bytes so far (ties: the lower rank), so every
// rank computes the same split and the shards' sizes differ by at most one entry.
inline StateDict shard_of(const StateDict& sd, int rank, int world) {
  REEL_CHECK(world > 0 && rank >= 0 && rank < world, value_error, "shard_of: rank ", rank, " of a world of ", world);
  std::vector<std::pair<int64_t, size_t>> order;  // (bytes, position)
  size_t k = 0;
  for (const auto& [name, t] : sd) {
    order.emplace_back(t.defined() ? t.numel() * element_size(t.dtype()) : 0, k++);
    (void)name;
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<int64_t> load(static_cast<size_t>(world), 0);
  std::vector<char> mine(sd.size(), 0);
  for (const auto& [bytes, pos] : order) {
    const auto r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[r] += bytes;
    mine[pos] = static_cast<char>(r == static_cast<size_t>(rank));
  }
  StateDict r;
  k = 0;
  for (const auto& [name, t] : sd)
    if (mine[k++]) r.insert_or_assign(name, t);
  return r;
}

namespace detail_dist {
inline std::string shard_file(const std::string& prefix, int k, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05d-of-%05d.safetensors", k, n);
  const auto slash = prefix.find_last_of('/');
  return (slash == std::string::npos ? prefix : prefix.substr(slash + 1)) + buf;
}
inline std::string folder_of(const std::string& prefix) {
  const auto slash = prefix.find_last_of('/');
  return slash == std::string::npos ? std::string() : prefix.substr(0, slash + 1);
}
// Every member's strings (here: "bytes name" lines), gathered on every member.
inline std::vector<std::string> all_gather_strings(const std::string& mine, const CollectiveOptions& o) {
  auto len = full<int64_t>({1}, static_cast<int64_t>(mine.size()));
  std::vector<Tensor<int64_t>> lens;
  all_gather(lens, len, o);
  int64_t longest = 0;
  for (auto& l : lens) longest = std::max(longest, l.item());
  auto buf = zeros<uint8_t>({longest});
  std::copy(mine.begin(), mine.end(), buf.mutable_data_ptr());
  std::vector<Tensor<uint8_t>> all;
  all_gather(all, buf, o);
  std::vector<std::string> r;
  for (size_t k = 0; k < all.size(); ++k)
    r.emplace_back(reinterpret_cast<const char*>(all[k].data_ptr()), static_cast<size_t>(lens[k].item()));
  return r;
}
}  // namespace detail_dist

// Each member of the group (default: the world) writes its shard (the members' names must be
// disjoint: checked on every member before anything is written); the group's first member
// writes the index. Returns once every file is complete (a barrier).
inline void save_sharded(const std::string& prefix, const StateDict& shard, CollectiveOptions o = {}) {
  const ProcessGroup& g = detail_dist::group_of(o, "save_sharded");
  std::string mine;
  for (const auto& [name, t] : shard) {
    REEL_CHECK(name.find('\n') == std::string::npos, value_error, "save_sharded: a name with a line break");
    mine += std::to_string(t.defined() ? t.numel() * element_size(t.dtype()) : 0) + " " + name + "\n";
  }
  const auto lists = detail_dist::all_gather_strings(mine, o);
  std::map<std::string, size_t> owner;  // name -> its member's place in the group
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  int64_t total = 0;
  for (size_t k = 0; k < lists.size(); ++k) {
    std::istringstream in(lists[k]);
    int64_t bytes = 0;
    std::string name;
    while (in >> bytes && in.get() == ' ' && std::getline(in, name)) {
      auto [it, fresh] = owner.emplace(name, k);
      REEL_CHECK(fresh, value_error, "save_sharded: '", name, "' is in the shards of rank ", g.ranks()[it->second],
                 " and of rank ", g.ranks()[k], " (each name belongs to one shard: shard_of deals them)");
      map[name] = detail_dist::shard_file(prefix, static_cast<int>(k) + 1, g.size());
      total += bytes;
    }
  }
  save_safetensors(detail_dist::folder_of(prefix) + detail_dist::shard_file(prefix, g.rank() + 1, g.size()), shard,
                   {{"format", "pt"}});
  if (g.rank() == 0) {
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
    detail::io::write_atomically(prefix + ".safetensors.index.json", "save_sharded",
                                 [&](std::ostream& f) { f << index.dump(2) << "\n"; });
  }
  barrier(o);
}

// The whole state dict of a sharded checkpoint (the index's entries, in its order).
inline StateDict load_sharded(const std::string& prefix, SafetensorsLoadOptions opt = {}) {
  const std::string path = prefix + ".safetensors.index.json";
  std::ifstream f(path);
  REEL_CHECK(f.good(), error, "load_sharded: cannot read ", path);
  nlohmann::ordered_json index;
  try {
    index = nlohmann::ordered_json::parse(f);
  } catch (const std::exception& e) {
    raise<value_error>("load_sharded: ", path, " is not JSON: ", e.what());
  }
  REEL_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), value_error,
             "load_sharded: ", path, " has no \"weight_map\" object");
  std::map<std::string, StateDict> files;
  StateDict r;
  for (const auto& [name, file] : index["weight_map"].items()) {
    REEL_CHECK(file.is_string(), value_error, "load_sharded: ", path, ": the file of '", name, "' is not a string");
    const std::string fname = file.get<std::string>();
    REEL_CHECK(fname.find('/') == std::string::npos, value_error, "load_sharded: ", path, ": '", fname,
               "' is not a file name beside the index");
    auto it = files.find(fname);
    if (it == files.end()) it = files.emplace(fname, load_safetensors(detail_dist::folder_of(prefix) + fname, opt)).first;
    REEL_CHECK(it->second.contains(name), value_error, "load_sharded: the index puts '", name, "' in ", fname,
               ", which has no such tensor");
    r.insert_or_assign(name, it->second.at(name));
  }
  return r;
}

}  // namespace reel::inline REEL_ABI::distributed
