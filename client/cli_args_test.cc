// CLI argument parsing and help: every subcommand, flag forms, errors, and
// help text that documents every flag.
#include "client/cli_args.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(CliArgs, ParsesSubcommandsPositionalsAndFlags) {
  auto a = ParseArgs({"submit", "job.yaml", "--watch", "--coordinator", "h:1", "--json"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->command, "submit");
  EXPECT_EQ(a->positional, std::vector<std::string>{"job.yaml"});
  EXPECT_TRUE(a->Has("watch"));
  EXPECT_TRUE(a->Has("json"));
  EXPECT_EQ(a->Get("coordinator"), "h:1");
  auto w = ParseArgs({"watch", "job-3", "--from-step=7"});
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->Get("from-step"), "7");
  for (const char* cmd : {"jobs", "workers"}) EXPECT_TRUE(ParseArgs({cmd}).ok()) << cmd;
  EXPECT_TRUE(ParseArgs({"status", "job-1"}).ok());
  EXPECT_TRUE(ParseArgs({"cancel", "job-1", "--reason", "x"}).ok());
  EXPECT_TRUE(ParseArgs({"data", "text", "--out", "o", "a.txt", "b.txt"}).ok());
}

TEST(CliArgs, RejectsBadUsage) {
  EXPECT_FALSE(ParseArgs({"launch"}).ok());
  EXPECT_FALSE(ParseArgs({"submit"}).ok());
  EXPECT_FALSE(ParseArgs({"status", "a", "b"}).ok());
  EXPECT_FALSE(ParseArgs({"jobs", "--nope"}).ok());
  EXPECT_FALSE(ParseArgs({"jobs", "--coordinator"}).ok());
  EXPECT_FALSE(ParseArgs({"jobs", "--json=yes"}).ok());
}

TEST(CliArgs, HelpDocumentsEveryFlag) {
  EXPECT_TRUE(ParseArgs({})->help);
  EXPECT_TRUE(ParseArgs({"--help"})->help);
  auto h = ParseArgs({"submit", "--help"});
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->help);
  for (const CommandSpec& c : Commands()) {
    std::string help = CommandHelp(c);
    for (const FlagSpec& f : c.flags) EXPECT_NE(help.find("--" + f.name), std::string::npos) << c.name;
    for (const FlagSpec& f : CommonFlags()) EXPECT_NE(help.find("--" + f.name), std::string::npos);
    EXPECT_NE(ProgramHelp().find(c.usage), std::string::npos);
  }
  EXPECT_NE(ProgramHelp().find("exit codes"), std::string::npos);
}

}  // namespace
}  // namespace tessera
