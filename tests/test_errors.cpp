// Exception categories and the warnings handler.
#include <doctest/doctest.h>

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

TEST_CASE("warnings: default, once, ignore, error and a custom sink") {
  std::vector<std::string> got;
  auto prev = set_warning_sink([&](const Warning& w) { got.push_back(w.category + ":" + w.message); });
  set_warning_action(WarningAction::Default);
  warn("a");
  warn("a");
  warn("a", "FutureWarning");
  CHECK(got == std::vector<std::string>{"UserWarning:a", "FutureWarning:a"});
  got.clear();
  set_warning_action(WarningAction::Once);
  warn("b");
  warn("b", "FutureWarning");
  CHECK(got.size() == 1);
  got.clear();
  set_warning_action(WarningAction::Ignore);
  warn("c");
  CHECK(got.empty());
  set_warning_action(WarningAction::Error);
  CHECK_THROWS_AS(warn("d"), warning_error);
  CHECK_THROWS_AS(warn("d"), error);
  set_warning_action(WarningAction::Default);
  set_warning_sink(prev);
}
