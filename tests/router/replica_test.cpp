#include "router/replica.h"

#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace tachyon::router {
namespace {

namespace json = boost::json;

ReplicaAddress parsed(std::string_view url) {
  Result<ReplicaAddress> address = parse_replica_url(url);
  EXPECT_TRUE(address.ok()) << url << ": " << address.status().message();
  return address.ok() ? *address : ReplicaAddress{};
}

void expect_refused(std::string_view url) {
  Result<ReplicaAddress> address = parse_replica_url(url);
  EXPECT_FALSE(address.ok()) << url << " parsed as " << (address.ok() ? address->url : "");
  if (!address.ok()) {
    EXPECT_EQ(address.status().code(), StatusCode::kInvalidArgument) << url;
  }
}

TEST(ParseReplicaUrlTest, HttpHostPort) {
  const ReplicaAddress address = parsed("http://10.0.0.5:8080");
  EXPECT_EQ(address.host, "10.0.0.5");
  EXPECT_EQ(address.port, "8080");
  EXPECT_EQ(address.url, "http://10.0.0.5:8080");
}

TEST(ParseReplicaUrlTest, BareHostPort) {
  const ReplicaAddress address = parsed("localhost:9000");
  EXPECT_EQ(address.host, "localhost");
  EXPECT_EQ(address.port, "9000");
  EXPECT_EQ(address.url, "http://localhost:9000");
}

TEST(ParseReplicaUrlTest, TrailingSlash) {
  EXPECT_EQ(parsed("http://localhost:9000/").url, "http://localhost:9000");
  EXPECT_EQ(parsed("localhost:9000//").url, "http://localhost:9000");
}

TEST(ParseReplicaUrlTest, Ipv6InBrackets) {
  const ReplicaAddress address = parsed("[::1]:8080");
  EXPECT_EQ(address.host, "::1");  // unbracketed: brackets are only for the URL
  EXPECT_EQ(address.port, "8080");
  EXPECT_EQ(address.url, "http://[::1]:8080");
  EXPECT_EQ(parsed("http://[fe80::2]:81/").url, "http://[fe80::2]:81");
}

TEST(ParseReplicaUrlTest, PortDefaultsTo80) {
  EXPECT_EQ(parsed("http://example").url, "http://example:80");
  EXPECT_EQ(parsed("[::1]").url, "http://[::1]:80");
}

TEST(ParseReplicaUrlTest, PortIsNormalised) {
  EXPECT_EQ(parsed("host:0080").port, "80");
  EXPECT_EQ(parsed("host:0080").url, "http://host:80");
}

TEST(ParseReplicaUrlTest, HttpsRefused) {
  Result<ReplicaAddress> address = parse_replica_url("https://host:443");
  ASSERT_FALSE(address.ok());
  EXPECT_NE(address.status().message().find("https"), std::string::npos);
}

TEST(ParseReplicaUrlTest, PathRefused) {
  expect_refused("http://host:8080/v1");
  expect_refused("host:8080/v1/chat/completions");
}

TEST(ParseReplicaUrlTest, BadPortRefused) {
  for (const char* url : {"host:abc", "host:80x", "host:", "host:-1", "host:+80", "host:8 0",
                          "[::1]:", "[::1]:port"}) {
    expect_refused(url);
  }
}

TEST(ParseReplicaUrlTest, PortOutOfRangeRefused) {
  expect_refused("host:0");
  expect_refused("host:65536");
  expect_refused("host:99999999999999999999");  // past int: from_chars overflows
  EXPECT_EQ(parsed("host:1").port, "1");
  EXPECT_EQ(parsed("host:65535").port, "65535");
}

TEST(ParseReplicaUrlTest, MissingHostRefused) {
  expect_refused("");
  expect_refused("http://");
  expect_refused(":8080");
  expect_refused("http://:8080");
  expect_refused("[]:8080");
  expect_refused("[::1:8080");  // unclosed bracket
}

TEST(ParseReplicaUrlTest, Ipv6WithoutBracketsOrJunkAfterThemRefused) {
  expect_refused("::1");
  expect_refused("host:80:90");
  expect_refused("[::1]8080");
  expect_refused("[::1]junk");
}

TEST(ReplicaTest, AddressAccessors) {
  Replica replica(3, parsed("http://localhost:9000"));
  EXPECT_EQ(replica.index(), 3);
  EXPECT_EQ(replica.host(), "localhost");
  EXPECT_EQ(replica.port(), "9000");
  EXPECT_EQ(replica.url(), "http://localhost:9000");
  EXPECT_EQ(replica.authority(), "localhost:9000");
  // An IPv6 Host header needs its brackets back.
  EXPECT_EQ(Replica(0, parsed("[::1]:8080")).authority(), "[::1]:8080");
}

TEST(ReplicaTest, StartsDownAndSetUpReportsChanges) {
  Replica replica(0, parsed("localhost:9000"));
  EXPECT_FALSE(replica.up());
  EXPECT_TRUE(replica.set_up(true));
  EXPECT_TRUE(replica.up());
  EXPECT_FALSE(replica.set_up(true));  // already up: no change
  EXPECT_TRUE(replica.up());
  EXPECT_TRUE(replica.set_up(false));
  EXPECT_FALSE(replica.up());
  EXPECT_FALSE(replica.set_up(false));
}

TEST(ReplicaTest, ServesTheModelsSet) {
  Replica replica(0, parsed("localhost:9000"));
  EXPECT_FALSE(replica.serves("m"));
  replica.set_models({json::object{{"id", "m"}, {"object", "model"}}, json::object{{"id", "n"}}});
  EXPECT_TRUE(replica.serves("m"));
  EXPECT_TRUE(replica.serves("n"));
  EXPECT_FALSE(replica.serves("o"));
  EXPECT_FALSE(replica.serves(""));
  ASSERT_EQ(replica.models().size(), 2u);
  EXPECT_EQ(replica.models()[0].at("object").as_string(), "model");

  // A new list replaces the old one.
  replica.set_models({json::object{{"id", "o"}}});
  EXPECT_FALSE(replica.serves("m"));
  EXPECT_TRUE(replica.serves("o"));
}

TEST(ReplicaTest, ModelsWithoutAStringIdServeNothing) {
  Replica replica(0, parsed("localhost:9000"));
  replica.set_models({json::object{{"name", "m"}}, json::object{{"id", 7}}});
  EXPECT_FALSE(replica.serves("m"));
  EXPECT_FALSE(replica.serves("7"));
}

TEST(ReplicaTest, LoadCounters) {
  Replica replica(0, parsed("localhost:9000"));
  EXPECT_EQ(replica.outstanding_requests(), 0);
  EXPECT_EQ(replica.outstanding_tokens(), 0);

  replica.begin_request(100);
  replica.begin_request(50);
  EXPECT_EQ(replica.outstanding_requests(), 2);
  EXPECT_EQ(replica.outstanding_tokens(), 150);
  EXPECT_EQ(replica.requests_total.load(), 2u);

  replica.end_request(100);
  EXPECT_EQ(replica.outstanding_requests(), 1);
  EXPECT_EQ(replica.outstanding_tokens(), 50);
  replica.end_request(50);
  EXPECT_EQ(replica.outstanding_requests(), 0);
  EXPECT_EQ(replica.outstanding_tokens(), 0);
  // requests_total counts every request sent, not the ones in flight.
  EXPECT_EQ(replica.requests_total.load(), 2u);
  EXPECT_EQ(replica.failures_total.load(), 0u);
}

}  // namespace
}  // namespace tachyon::router

namespace tachyon::router {
namespace {

// Idle connections: one still open comes back; one the replica closed is dropped.
TEST(ReplicaTest, IdleConnectionsSkipThoseClosedByThePeer) {
  Replica replica(0, parsed("http://127.0.0.1:9000"));
  EXPECT_EQ(replica.take_idle_connection(), -1);
  int open_pair[2], closed_pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, open_pair), 0);
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, closed_pair), 0);
  replica.put_idle_connection(open_pair[0]);
  replica.put_idle_connection(closed_pair[0]);
  ::close(closed_pair[1]);  // the peer hung up: EOF on closed_pair[0]
  EXPECT_EQ(replica.take_idle_connection(), open_pair[0]);  // the closed one was skipped
  EXPECT_EQ(replica.take_idle_connection(), -1);
  ::close(open_pair[0]);
  ::close(open_pair[1]);
}

// Bytes waiting on an idle connection (a stray response) make it unusable too.
TEST(ReplicaTest, IdleConnectionWithUnreadBytesIsDropped) {
  Replica replica(0, parsed("http://127.0.0.1:9000"));
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  ASSERT_EQ(::write(pair[1], "x", 1), 1);
  replica.put_idle_connection(pair[0]);
  EXPECT_EQ(replica.take_idle_connection(), -1);
  ::close(pair[1]);
}

}  // namespace
}  // namespace tachyon::router
