// Exception categories and the warnings handler.
#include <doctest/doctest.h>

#include <thread>

#include <reel/reel.hpp>

using namespace reel;

TEST_CASE("exception hierarchy mirrors the Python categories") {
  static_assert(std::is_base_of_v<std::runtime_error, error>);
  static_assert(std::is_base_of_v<error, type_error>);
  static_assert(std::is_base_of_v<error, value_error>);
  static_assert(std::is_base_of_v<error, index_error>);
  static_assert(std::is_base_of_v<error, not_implemented_error>);
  static_assert(std::is_base_of_v<error, unpickling_error>);
  CHECK_THROWS_AS(zeros<float>({2}).select(0, 5), index_error);
  try {
    (void)Tensor<float>(zeros<float>({2, 3}) * zeros<float>({4}));
    FAIL("expected value_error");
  } catch (const value_error& e) {
    std::string m = e.what();
    CHECK(m.find("[2, 3]") != std::string::npos);
    CHECK(m.find("[4]") != std::string::npos);
  }
}

TEST_CASE("warnings: default (once per call site), once, always, ignore, error and a custom sink") {
  warnings::catch_warnings scope;  // everything below is undone at the end
  std::vector<std::string> got;
  set_warning_sink([&](const Warning& w) { got.push_back(std::string(category_name(w.category)) + ":" + w.message); });
  set_warning_action(WarningAction::Default);
  for (int i = 0; i < 3; ++i) warn("a");  // one call site: shown once
  warn("a");                               // another call site: shown again
  warn("a", WarningCategory::FutureWarning);
  CHECK(got == std::vector<std::string>{"UserWarning:a", "UserWarning:a", "FutureWarning:a"});
  got.clear();
  set_warning_action(WarningAction::Once);  // per message and category, wherever
  warn("b");
  warn("b");
  warn("b", WarningCategory::FutureWarning);
  CHECK(got == std::vector<std::string>{"UserWarning:b", "FutureWarning:b"});
  got.clear();
  set_warning_action(WarningAction::Always);
  for (int i = 0; i < 3; ++i) warn("c");
  CHECK(got.size() == 3);
  got.clear();
  set_warning_action(WarningAction::Ignore);
  warn("c");
  CHECK(got.empty());
  set_warning_action(WarningAction::Error);
  CHECK_THROWS_WITH_AS(warn("d"), "UserWarning: d", warning_error);
  CHECK_THROWS_AS(warn("d", WarningCategory::RuntimeWarning), error);
  CHECK(got.empty());
}

TEST_CASE("warnings: actions per category override the global one; catch_warnings records and restores") {
  {
    warnings::catch_warnings rec(true);
    set_warning_action(WarningAction::Always);
    set_warning_action(WarningCategory::DeprecationWarning, WarningAction::Ignore);
    set_warning_action(WarningCategory::RuntimeWarning, WarningAction::Error);
    CHECK(warning_action(WarningCategory::DeprecationWarning) == WarningAction::Ignore);
    CHECK(warning_action(WarningCategory::UserWarning) == WarningAction::Always);
    warn("old", WarningCategory::DeprecationWarning);
    warn("new", WarningCategory::FutureWarning);
    CHECK_THROWS_WITH_AS(warn("nan seen", WarningCategory::RuntimeWarning), "RuntimeWarning: nan seen", warning_error);
    const int line = __LINE__ + 1;
    warn("mine");
    const auto log = rec.log();
    REQUIRE(log.size() == 2);
    CHECK(log[0].category == WarningCategory::FutureWarning);
    CHECK(log[1].message == "mine");
    CHECK(log[1].line == line);
    CHECK(log[1].file.find("test_errors.cpp") != std::string::npos);
    {
      warnings::catch_warnings inner;  // nested: restores the outer scope's state
      set_warning_action(WarningAction::Ignore);
      warn("dropped");
    }
    CHECK(warning_action(WarningCategory::UserWarning) == WarningAction::Always);
    warn("kept");
    CHECK(rec.log().size() == 3);
    set_warning_action(WarningAction::Error);  // replaces the per-category actions
    CHECK(warning_action(WarningCategory::DeprecationWarning) == WarningAction::Error);
  }
  CHECK(warning_action(WarningCategory::RuntimeWarning) == WarningAction::Default);  // restored
  CHECK(warning_action(WarningCategory::DeprecationWarning) == WarningAction::Default);
}

TEST_CASE("warnings: thread-safe; Default shows a warning once even when many threads raise it at once") {
  warnings::catch_warnings rec(true);
  set_warning_action(WarningAction::Default);
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([] {
      for (int i = 0; i < 200; ++i) warn("shared");
    });
  for (auto& t : ts) t.join();
  CHECK(rec.log().size() == 1);
  set_warning_action(WarningAction::Always);
  ts.clear();
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([] {
      for (int i = 0; i < 50; ++i) warn("each", WarningCategory::RuntimeWarning);
    });
  for (auto& t : ts) t.join();
  CHECK(rec.log().size() == 1 + 8 * 50);
}
