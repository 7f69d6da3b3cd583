#pragma once
// The bodies of structured's non-template runtime functions (header-only mode: included by it;
// compiled mode: by src/runtime.cpp).
#include "structured.hpp"

namespace reel::inline REEL_ABI::detail {
REEL_INLINE int64_t& struct_budget() {
  thread_local int64_t b = 0;  // 0: none
  return b;
}

REEL_INLINE int free_count(const TanTerm& t) {
  return static_cast<int>(std::count(t.dim_of.begin(), t.dim_of.end(), -1));
}

REEL_INLINE GradPtr reshaped(const GradPtr& t, Shape s, const GradType* type) {
  if (t->sizes == s) return t;
  return apply_view(t, {ViewSpec::Reshape, 0, 0, 0, 0, std::move(s)}, type);
}

REEL_INLINE GradPtr densify(const StructTangent& s) {
  GradModeGuard ng(false);
  const GradType* ty = s.type;
  const size_t nc = s.comps.size(), n = s.sizes.size();
  Shape full = s.comps;
  for (int64_t d : s.sizes) full.push_back(d);
  if (struct_budget() > 0 && numel_of(full) > struct_budget()) throw StructBudgetExceeded{};
  GradPtr z = ty->zeros(full);
  const Shape cs = contiguous_strides(full);
  bool first = true;
  for (const TanTerm& t : s.terms) {
    Geometry g;
    for (size_t q = 0; q < nc; ++q)
      if (t.dim_of[q] < 0) {
        g.sizes.push_back(s.comps[q]);
        g.strides.push_back(cs[q]);
      }
    for (size_t d = 0; d < n; ++d) {
      int64_t st = cs[nc + d];
      for (size_t q = 0; q < nc; ++q)
        if (t.dim_of[q] == static_cast<int>(d)) st += cs[q];
      g.sizes.push_back(s.sizes[d]);
      g.strides.push_back(st);
    }
    GradPtr v = view_with(*z, std::move(g));
    if (first)
      ty->copy_into(v, t.coef);
    else
      ty->add_inplace(v, t.coef);
    first = false;
  }
  Shape flat{numel_of(s.comps)};
  for (int64_t d : s.sizes) flat.push_back(d);
  return reshaped(z, std::move(flat), ty);
}

REEL_INLINE StructTangent as_struct(const GradPtr& dense, const Shape& comps, const Shape& sizes, const GradType* type) {
  StructTangent s{comps, sizes, type, {}};
  Shape c = comps;
  for (int64_t d : sizes) c.push_back(d);
  s.terms.push_back({std::vector<int>(comps.size(), -1), reshaped(dense, std::move(c), type)});
  return s;
}

REEL_INLINE void add_term(StructTangent& s, TanTerm t) {
  for (auto& u : s.terms)
    if (u.dim_of == t.dim_of) {
      u.coef = s.type->add(u.coef, t.coef);
      return;
    }
  s.terms.push_back(std::move(t));
}

REEL_INLINE StructPtr finish_struct(StructTangent s) {
  if (s.terms.size() > kMaxTangentTerms) {
    GradPtr d = densify(s);
    s = as_struct(d, s.comps, s.sizes, s.type);
  }
  return std::make_shared<const StructTangent>(std::move(s));
}

REEL_INLINE bool structure_ok(uint64_t level) {
  return tangents_as_values(level) && !grad_mode_flag() && level_state().live.size() == 1;
}

REEL_INLINE StructPtr view_struct(const StructTangent& s, const ViewSpec& v, const Shape& out) {
  const Shape& in = s.sizes;
  const int64_t ni = static_cast<int64_t>(in.size()), no = static_cast<int64_t>(out.size());
  StructTangent r{s.comps, out, s.type, {}};
  switch (v.kind) {
    case ViewSpec::Reshape: {
      // the dims other than 1 must match one to one
      std::vector<int> to(ni, -1);
      int64_t j = 0;
      for (int64_t i = 0; i < ni; ++i) {
        if (in[i] == 1) continue;
        while (j < no && out[j] == 1) ++j;
        if (j == no || out[j] != in[i]) return nullptr;
        to[i] = static_cast<int>(j++);
      }
      while (j < no && out[j] == 1) ++j;
      if (j != no) return nullptr;
      for (const TanTerm& t : s.terms) {
        const int nf = free_count(t);
        Shape c(t.coef->sizes.begin(), t.coef->sizes.begin() + nf);
        Shape body(no, 1);
        for (int64_t i = 0; i < ni; ++i)
          if (to[i] >= 0) body[to[i]] = t.coef->sizes[nf + i];
        for (int64_t d : body) c.push_back(d);
        TanTerm u{t.dim_of, reshaped(t.coef, std::move(c), s.type)};
        for (int& d : u.dim_of)
          if (d >= 0) d = to[d];
        r.terms.push_back(std::move(u));
      }
      break;
    }
    case ViewSpec::Expand: {  // new leading dims; the expanded ones stay broadcast in the coefficients
      const int64_t shift = no - ni;
      for (const TanTerm& t : s.terms) {
        const int nf = free_count(t);
        Shape c(t.coef->sizes.begin(), t.coef->sizes.begin() + nf);
        for (int64_t i = 0; i < shift; ++i) c.push_back(1);
        for (int64_t i = 0; i < ni; ++i) c.push_back(t.coef->sizes[nf + i]);
        TanTerm u{t.dim_of, reshaped(t.coef, std::move(c), s.type)};
        for (int& d : u.dim_of)
          if (d >= 0) d += static_cast<int>(shift);
        r.terms.push_back(std::move(u));
      }
      break;
    }
    case ViewSpec::Permute: {
      for (const TanTerm& t : s.terms) {
        const int nf = free_count(t);
        Shape p;
        for (int q = 0; q < nf; ++q) p.push_back(q);
        for (int64_t o : v.shape) p.push_back(nf + o);
        TanTerm u{t.dim_of, apply_view(t.coef, {ViewSpec::Permute, 0, 0, 0, 0, std::move(p)}, s.type)};
        for (int& d : u.dim_of)
          if (d >= 0) d = static_cast<int>(std::find(v.shape.begin(), v.shape.end(), d) - v.shape.begin());
        r.terms.push_back(std::move(u));
      }
      break;
    }
    case ViewSpec::Select: {  // a coordinate picked (x.select(1, 0)): a component it equals becomes free
      const int64_t d = wrap_dim(v.a, ni, "select"), i = v.b < 0 ? v.b + in[d] : v.b;
      for (const TanTerm& t : s.terms) {
        const int nf = free_count(t);
        GradPtr c = t.coef;
        if (c->sizes[nf + d] == 1) {  // broadcast along d: the same coefficient at every index
          Shape cs = c->sizes;
          cs.erase(nf + d);
          c = reshaped(c, std::move(cs), s.type);
        } else {
          c = apply_view(c, {ViewSpec::Select, nf + d, i, 0, 0, {}}, s.type);
        }
        TanTerm u{t.dim_of, nullptr};
        const auto q = std::find(t.dim_of.begin(), t.dim_of.end(), static_cast<int>(d)) - t.dim_of.begin();
        if (q < static_cast<int64_t>(t.dim_of.size())) {
          // t[k, s'] = c[.., s'] [k_q == i]: the component's coefficient is c at index i, 0 elsewhere
          const int pos = static_cast<int>(std::count(t.dim_of.begin(), t.dim_of.begin() + q, -1));
          Shape zs = c->sizes;
          zs.insert(pos, s.comps[q]);
          GradPtr z = s.type->zeros(zs);
          s.type->copy_into(apply_view(z, {ViewSpec::Select, pos, i, 0, 0, {}}, s.type), c);
          c = z;
          u.dim_of[q] = -1;
        }
        for (int& e : u.dim_of)
          if (e > d) --e;
        u.coef = std::move(c);
        r.terms.push_back(std::move(u));
      }
      break;
    }
    default: return nullptr;
  }
  return finish_struct(std::move(r));
}

REEL_INLINE StructPtr sum_struct(const StructTangent& s, Shape dims, bool keepdim, double scale, const Shape& out) {
  const int64_t n = static_cast<int64_t>(s.sizes.size());
  if (dims.empty())
    for (int64_t d = 0; d < n; ++d) dims.push_back(d);
  std::vector<char> red(n, 0);
  for (int64_t d : dims) red[wrap_dim(d, n, "sum")] = 1;
  const size_t nc = s.comps.size();
  StructTangent r{s.comps, out, s.type, {}};
  for (const TanTerm& t : s.terms) {
    const int nf = free_count(t);
    GradPtr c = t.coef;
    // 1. the reduced dims no component equals: summed (kept as 1s); a broadcast one scales
    Shape sum_dims;
    double times = scale;
    for (int64_t d = 0; d < n; ++d) {
      if (!red[d] || std::find(t.dim_of.begin(), t.dim_of.end(), d) != t.dim_of.end()) continue;
      if (c->sizes[nf + d] == 1)
        times *= static_cast<double>(s.sizes[d]);
      else
        sum_dims.push_back(nf + d);
    }
    if (!sum_dims.empty()) c = s.type->sum(c, sum_dims, true);
    if (times != 1) c = s.type->scale(c, times);
    // 2. the coefficient dims in the new order: the free components (old and newly freed) in
    // component order, then the dims that remain
    TanTerm u{t.dim_of, nullptr};
    Shape perm;
    int f = 0;
    for (size_t q = 0; q < nc; ++q) {
      if (t.dim_of[q] < 0) {
        perm.push_back(f++);
      } else if (red[t.dim_of[q]]) {
        perm.push_back(nf + t.dim_of[q]);
        u.dim_of[q] = -1;
      }
    }
    std::vector<int> new_dim(n, -1);  // where a dim that stays goes
    int kept = 0;
    for (int64_t d = 0; d < n; ++d) {
      const bool freed = red[d] && std::find(t.dim_of.begin(), t.dim_of.end(), d) != t.dim_of.end();
      if (!freed) perm.push_back(nf + d);
      if (keepdim) new_dim[d] = static_cast<int>(d);
      else if (!red[d]) new_dim[d] = kept++;
    }
    c = apply_view(c, {ViewSpec::Permute, 0, 0, 0, 0, perm}, s.type);
    // 3. the result's dims: the freed ones come back as 1s (keepdim), the summed ones go
    // (unless keepdim)
    const int nf2 = free_count(u);
    Shape cs(c->sizes.begin(), c->sizes.begin() + nf2);
    size_t body = nf2;
    for (int64_t d = 0; d < n; ++d) {
      const bool freed = red[d] && std::find(t.dim_of.begin(), t.dim_of.end(), d) != t.dim_of.end();
      if (freed) {
        if (keepdim) cs.push_back(1);
      } else {
        if (!red[d] || keepdim) cs.push_back(c->sizes[body]);
        ++body;
      }
    }
    u.coef = reshaped(c, std::move(cs), s.type);
    for (int& d : u.dim_of)
      if (d >= 0) d = new_dim[d];
    add_term(r, std::move(u));
  }
  return finish_struct(std::move(r));
}

}  // namespace
