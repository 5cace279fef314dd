#include "gateway/key_store.h"

#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "gateway/key_secret.h"
#include "temp_database.h"

namespace tachyon::gateway {
namespace {

TEST(KeySecretTest, SecretsAreLongRandomAndBase62) {
  Result<std::string> a = generate_secret();
  Result<std::string> b = generate_secret();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  ASSERT_EQ(a->size(), kSecretPrefix.size() + kSecretRandomChars);
  EXPECT_TRUE(a->starts_with("sk-tachyon-"));
  for (char c : a->substr(kSecretPrefix.size()))
    EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)));
}

TEST(KeySecretTest, HashIsSha256AndComparesInConstantTime) {
  // SHA-256("abc"), FIPS 180-2 appendix B.1.
  const SecretHash hash = hash_secret("abc");
  EXPECT_EQ(hash[0], 0xba);
  EXPECT_EQ(hash[31], 0xad);
  EXPECT_TRUE(hashes_equal(hash, hash_secret("abc")));
  SecretHash last_byte_differs = hash;
  last_byte_differs[31] ^= 1;
  EXPECT_FALSE(hashes_equal(hash, last_byte_differs));
  SecretHash first_byte_differs = hash;
  first_byte_differs[0] ^= 1;
  EXPECT_FALSE(hashes_equal(hash, first_byte_differs));
}

TEST(KeySecretTest, RedactionShowsOnlyTheEnds) {
  EXPECT_EQ(redact_secret("sk-tachyon-abcdefghijklmnopqrstuvwxyz"), "sk-tac***...wxyz");
  EXPECT_EQ(redact_secret("short"), "***");
  EXPECT_EQ(secret_hint("sk-tachyon-abcdefghijklmnopqrstuvwxyz"), "sk-tac...wxyz");
}

class KeyStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<KeyStore>> store = KeyStore::open(db_.path());
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = std::move(*store);
  }
  TempDatabase db_;
  std::unique_ptr<KeyStore> store_;
};

TEST_F(KeyStoreTest, CreateStoresOnlyTheHash) {
  Result<CreatedKey> created = store_->create("alice", tier_defaults(Tier::kFree));
  ASSERT_TRUE(created.ok()) << created.status().message();
  EXPECT_EQ(created->key.name, "alice");
  EXPECT_EQ(created->key.policy.requests_per_minute, 20);
  EXPECT_EQ(created->key.policy.tokens_per_minute, 40000);
  EXPECT_EQ(created->key.policy.max_concurrent_requests, 2);
  EXPECT_EQ(created->key.hint, secret_hint(created->secret));

  Result<std::optional<ApiKey>> found = store_->find_by_hash(hash_secret(created->secret));
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_EQ((*found)->id, created->key.id);
  Result<std::optional<ApiKey>> wrong = store_->find_by_hash(hash_secret(created->secret + "x"));
  ASSERT_TRUE(wrong.ok());
  EXPECT_FALSE(wrong->has_value());

  // The secret appears nowhere in the database files.
  store_.reset();
  for (const char* suffix : {"", "-wal"}) {
    std::ifstream file(db_.path() + suffix, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes.find(created->secret.substr(kSecretPrefix.size())), std::string::npos)
        << suffix;
  }
}

TEST_F(KeyStoreTest, NamesAreUniqueAndValidated) {
  ASSERT_TRUE(store_->create("alice", KeyPolicy{}).ok());
  Result<CreatedKey> duplicate = store_->create("alice", KeyPolicy{});
  ASSERT_FALSE(duplicate.ok());
  EXPECT_EQ(duplicate.status().message(), "a key named 'alice' already exists");
  EXPECT_EQ(store_->create("", KeyPolicy{}).status().message(),
            "key name must be 1 to 64 characters, got 0");
  EXPECT_EQ(store_->create("42", KeyPolicy{}).status().message(),
            "key name '42' is all digits, which reads as an id");
  EXPECT_EQ(store_->create("a b", KeyPolicy{}).status().message(),
            "key name 'a b' has a character other than letters, digits, '.', '_' and '-'");
  EXPECT_FALSE(store_->create("static-1", KeyPolicy{}).ok());
  KeyPolicy negative;
  negative.requests_per_minute = -1;
  EXPECT_EQ(store_->create("bob", negative).status().message(), "rpm must be >= 0, got -1");
}

TEST_F(KeyStoreTest, FindByNameOrId) {
  Result<CreatedKey> created = store_->create("alice", KeyPolicy{});
  ASSERT_TRUE(created.ok());
  EXPECT_EQ(store_->find("alice")->id, created->key.id);
  EXPECT_EQ(store_->find(std::to_string(created->key.id))->name, "alice");
  EXPECT_EQ(store_->find("nobody").status().message(), "no key named 'nobody'");
  EXPECT_EQ(store_->find("999").status().message(), "no key with id 999");
  EXPECT_EQ(store_->find("99999999999999999999999").status().code(), StatusCode::kNotFound);
}

TEST_F(KeyStoreTest, UpdateChangesOnlyWhatIsGiven) {
  KeyPolicy policy = tier_defaults(Tier::kFree);
  policy.models = {"m1", "m2"};
  ASSERT_TRUE(store_->create("alice", policy).ok());

  KeyPolicyChange change;
  change.requests_per_minute = 5;
  change.daily_tokens = 1000;
  Result<ApiKey> updated = store_->update("alice", change);
  ASSERT_TRUE(updated.ok()) << updated.status().message();
  EXPECT_EQ(updated->policy.requests_per_minute, 5);
  EXPECT_EQ(updated->policy.tokens_per_minute, 40000);
  EXPECT_EQ(updated->policy.daily_tokens, 1000);
  EXPECT_EQ(updated->policy.models, (std::vector<std::string>{"m1", "m2"}));

  // A new tier resets the tier's limits; explicit values still win.
  KeyPolicyChange tier_change;
  tier_change.tier = Tier::kPriority;
  tier_change.max_concurrent_requests = 7;
  tier_change.models = std::vector<std::string>{};
  updated = store_->update("alice", tier_change);
  ASSERT_TRUE(updated.ok());
  EXPECT_EQ(updated->policy.tier, Tier::kPriority);
  EXPECT_EQ(updated->policy.requests_per_minute, 3000);
  EXPECT_EQ(updated->policy.max_concurrent_requests, 7);
  EXPECT_EQ(updated->policy.daily_tokens, 1000);
  EXPECT_TRUE(updated->policy.models.empty());
  EXPECT_EQ(store_->find("alice")->policy, updated->policy);  // persisted

  KeyPolicyChange bad;
  bad.tokens_per_minute = -3;
  EXPECT_EQ(store_->update("alice", bad).status().message(), "tpm must be >= 0, got -3");
  EXPECT_EQ(store_->update("bob", change).status().message(), "no key named 'bob'");
}

TEST_F(KeyStoreTest, RevokeHidesTheKeyAndFreesTheName) {
  Result<CreatedKey> created = store_->create("alice", KeyPolicy{});
  ASSERT_TRUE(created.ok());
  Result<ApiKey> revoked = store_->revoke("alice");
  ASSERT_TRUE(revoked.ok());
  EXPECT_TRUE(revoked->revoked());
  Result<std::optional<ApiKey>> found = store_->find_by_hash(hash_secret(created->secret));
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_TRUE((*found)->revoked());  // the Gateway refuses revoked keys
  EXPECT_EQ(store_->revoke("alice").status().message(), "key 'alice' is already revoked");
  EXPECT_EQ(store_->update("alice", KeyPolicyChange{}).status().message(),
            "key 'alice' is revoked");

  // The name can be given to a new key; lookups by name find the live one.
  Result<CreatedKey> again = store_->create("alice", KeyPolicy{});
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(store_->find("alice")->id, again->key.id);
  Result<std::vector<ApiKey>> keys = store_->list();
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_TRUE((*keys)[0].revoked());
  EXPECT_FALSE((*keys)[1].revoked());
}

TEST_F(KeyStoreTest, ChangesFromAnotherConnectionAreSeen) {
  Result<std::unique_ptr<KeyStore>> other = KeyStore::open(db_.path(), OpenMode::kExisting);
  ASSERT_TRUE(other.ok());
  Result<CreatedKey> created = (*other)->create("alice", KeyPolicy{});
  ASSERT_TRUE(created.ok());
  EXPECT_TRUE(store_->find("alice").ok());
  EXPECT_EQ(KeyStore::open(db_.path() + ".missing", OpenMode::kExisting).status().code(),
            StatusCode::kNotFound);
}

TEST(KeyPolicyTest, TiersAndModels) {
  EXPECT_EQ(tier_defaults(Tier::kStandard).requests_per_minute, 300);
  EXPECT_EQ(tier_defaults(Tier::kStandard).tokens_per_minute, 400000);
  EXPECT_EQ(tier_defaults(Tier::kPriority).max_concurrent_requests, 64);
  EXPECT_EQ(parse_tier("gold").status().message(),
            "tier must be free, standard or priority, got 'gold'");
  EXPECT_EQ(split_models(" a, b,,c "), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(join_models({"a", "b"}), "a,b");
  KeyPolicy policy;
  EXPECT_TRUE(policy.allows_model("anything"));
  policy.models = {"a"};
  EXPECT_TRUE(policy.allows_model("a"));
  EXPECT_FALSE(policy.allows_model("b"));
}

}  // namespace
}  // namespace tachyon::gateway
