// Post-processors (TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence): reading,
// writing and applying them to one sequence's ids. See decoders.h.
#include "tokenize/decoders.h"

#include <attend/error.h>

namespace attend::tokenize {

namespace {

using Kind = PostStep::Kind;

// [{"SpecialToken": {"id", "type_id"}}, {"Sequence": {"id", "type_id"}}, ...] (Hugging Face's JSON takes no
// other form; the string form "[CLS]:0 $A:0" is its Python API's).
std::vector<PostStep::Item> read_template(const json& t, const Reader& r, const std::string& path) {
  std::vector<PostStep::Item> items;
  check(t.is_array(), "{}: {} is {}, expected a template: an array of {{\"SpecialToken\": ...}} and {{\"Sequence\": ...}}", r.origin, path, t.type_name());
  for (size_t k = 0; k < t.size(); ++k) {
    const std::string at = fmt::format("{}[{}]", path, k);
    const json& e = t[k];
    PostStep::Item item;
    const json* body = r.optional(e, "SpecialToken");
    item.special = body != nullptr;
    if (!body) body = r.optional(e, "Sequence");
    check(body != nullptr, "{}: {} is {}, expected {{\"SpecialToken\": ...}} or {{\"Sequence\": ...}}", r.origin, at, e.dump());
    item.id = r.string(r.field(*body, at, "id"), at + ".id");
    if (const json* type = r.optional(*body, "type_id")) item.type_id = r.integer(*type, at + ".type_id");
    check(item.special || item.id == "A" || item.id == "B", "{}: {}.Sequence.id is {:?}, expected A or B", r.origin, at, item.id);
    items.push_back(item);
  }
  return items;
}

json write_template(const std::vector<PostStep::Item>& items) {
  json out = json::array();
  for (const PostStep::Item& i : items)
    out.push_back({{i.special ? "SpecialToken" : "Sequence", {{"id", i.id}, {"type_id", i.type_id}}}});
  return out;
}

std::pair<std::string, int32_t> read_pair(const json& v, const Reader& r, const std::string& path) {
  check(v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_number_integer(),
        "{}: {} is {}, expected [token, id]", r.origin, path, v.dump());
  return {v[0].get<std::string>(), v[1].get<int32_t>()};
}

void read_step(const json& c, const Reader& r, const std::string& path, PostProcessor& out) {
  const std::string type = r.string(r.field(c, path, "type"), path + ".type");
  if (type == "Sequence") {
    const json& list = r.field(c, path, "processors");
    check(list.is_array(), "{}: {}.processors is {}, expected an array", r.origin, path, list.type_name());
    for (size_t i = 0; i < list.size(); ++i) read_step(list[i], r, fmt::format("{}.processors[{}]", path, i), out);
    out.sequence = true;
    return;
  }
  PostStep s;
  if (type == "TemplateProcessing") {
    s.kind = Kind::Template;
    s.single = read_template(r.field(c, path, "single"), r, path + ".single");
    if (const json* pair = r.optional(c, "pair")) s.pair = read_template(*pair, r, path + ".pair");
    if (const json* specials = r.optional(c, "special_tokens")) {
      check(specials->is_object(), "{}: {}.special_tokens is {}, expected an object", r.origin, path, specials->type_name());
      for (const auto& [key, value] : specials->items()) {
        const std::string at = fmt::format("{}.special_tokens[{:?}]", path, key);
        PostStep::Special sp{key, {}, {}};
        const json& ids = r.field(value, at, "ids");
        check(ids.is_array(), "{}: {}.ids is {}, expected an array of ids", r.origin, at, ids.type_name());
        for (const json& id : ids) sp.ids.push_back(static_cast<int32_t>(r.integer(id, at + ".ids[]")));
        if (const json* tokens = r.optional(value, "tokens"))
          for (const json& t : *tokens) sp.tokens.push_back(r.string(t, at + ".tokens[]"));
        s.specials.push_back(std::move(sp));
      }
    }
    for (const auto* list : {&s.single, &s.pair})
      for (const PostStep::Item& i : *list) {
        bool found = !i.special;
        for (const PostStep::Special& sp : s.specials) found |= sp.key == i.id;
        check(found, "{}: {} names the special token {:?}, which is not in {}.special_tokens", r.origin, path, i.id, path);
      }
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    s.kind = type == "BertProcessing" ? Kind::Bert : Kind::Roberta;
    std::tie(s.cls, s.cls_id) = read_pair(r.field(c, path, "cls"), r, path + ".cls");
    std::tie(s.sep, s.sep_id) = read_pair(r.field(c, path, "sep"), r, path + ".sep");
    s.trim_offsets = r.boolean(r.optional(c, "trim_offsets"), path + ".trim_offsets", true);
    s.add_prefix_space = r.boolean(r.optional(c, "add_prefix_space"), path + ".add_prefix_space", true);
  } else if (type == "ByteLevel") {
    s.kind = Kind::ByteLevel;
    s.add_prefix_space = r.boolean(r.optional(c, "add_prefix_space"), path + ".add_prefix_space", true);
    s.trim_offsets = r.boolean(r.optional(c, "trim_offsets"), path + ".trim_offsets", true);
    s.use_regex = r.boolean(r.optional(c, "use_regex"), path + ".use_regex", true);
  } else {
    throw Error(fmt::format("{}: {}.type is {:?}; expected TemplateProcessing, BertProcessing, RobertaProcessing, "
                            "ByteLevel or Sequence", r.origin, path, type));
  }
  out.steps.push_back(std::move(s));
}

json write_step(const PostStep& s) {
  switch (s.kind) {
    case Kind::Template: {
      json specials = json::object();
      for (const PostStep::Special& sp : s.specials) specials[sp.key] = {{"id", sp.key}, {"ids", sp.ids}, {"tokens", sp.tokens}};
      return {{"type", "TemplateProcessing"}, {"single", write_template(s.single)}, {"pair", write_template(s.pair)},
              {"special_tokens", specials}};
    }
    case Kind::Bert:
    case Kind::Roberta: {
      json j = {{"type", s.kind == Kind::Bert ? "BertProcessing" : "RobertaProcessing"},
                {"sep", {s.sep, s.sep_id}}, {"cls", {s.cls, s.cls_id}}};
      if (s.kind == Kind::Roberta) {
        j["trim_offsets"] = s.trim_offsets;
        j["add_prefix_space"] = s.add_prefix_space;
      }
      return j;
    }
    case Kind::ByteLevel:
      return {{"type", "ByteLevel"}, {"add_prefix_space", s.add_prefix_space}, {"trim_offsets", s.trim_offsets},
              {"use_regex", s.use_regex}};
  }
  return nullptr;
}

}  // namespace

std::vector<int32_t> PostProcessor::apply(std::vector<int32_t> ids) const {
  for (const PostStep& s : steps) {
    if (s.kind == Kind::ByteLevel) continue;
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    if (s.kind == Kind::Template) {
      for (const PostStep::Item& i : s.single) {
        if (!i.special) {
          if (i.id == "A") out.insert(out.end(), ids.begin(), ids.end());
          continue;
        }
        for (const PostStep::Special& sp : s.specials)
          if (sp.key == i.id) out.insert(out.end(), sp.ids.begin(), sp.ids.end());
      }
    } else {
      out.push_back(s.cls_id);
      out.insert(out.end(), ids.begin(), ids.end());
      out.push_back(s.sep_id);
    }
    ids = std::move(out);
  }
  return ids;
}

std::pair<int32_t, int32_t> PostProcessor::ends() const {
  int32_t first = -1, last = -1;
  for (const PostStep& s : steps) {
    if (s.kind == Kind::Bert || s.kind == Kind::Roberta) {
      first = s.cls_id;
      last = s.sep_id;
    } else if (s.kind == Kind::Template && !s.single.empty()) {
      auto id_of = [&](const PostStep::Item& i) {
        for (const PostStep::Special& sp : s.specials)
          if (sp.key == i.id && sp.ids.size() == 1) return sp.ids[0];
        return -1;
      };
      if (s.single.front().special) first = id_of(s.single.front());
      if (s.single.back().special && s.single.size() > 1) last = id_of(s.single.back());
    }
  }
  return {first, last};
}

PostProcessor read_post_processor(const json* node, const Reader& r, const std::string& path) {
  PostProcessor p;
  if (node) read_step(*node, r, path, p);
  return p;
}

json write_post_processor(const PostProcessor& p) {
  return write_stage(p, "processors", [](const PostStep& s) { return write_step(s); });
}

PostProcessor bos_eos_template(const std::string* bos, int32_t bos_id, const std::string* eos, int32_t eos_id) {
  PostStep s;
  s.kind = Kind::Template;
  for (int64_t type : {0, 1}) {
    auto& list = type == 0 ? s.single : s.pair;
    if (type == 1) list = s.single;
    if (bos) list.push_back({true, *bos, type});
    list.push_back({false, type == 0 ? "A" : "B", type});
    if (eos) list.push_back({true, *eos, type});
  }
  if (bos) s.specials.push_back({*bos, {bos_id}, {*bos}});
  if (eos && (!bos || *eos != *bos)) s.specials.push_back({*eos, {eos_id}, {*eos}});
  PostProcessor p;
  p.steps.push_back(std::move(s));
  return p;
}

}  // namespace attend::tokenize
