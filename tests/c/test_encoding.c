/* Unit tests of csrc/codec/encoding.c: Accept-Encoding weights (RFC 9110 12.5.3)
 * and the coding chosen among the ones the server offers. */
#include <string.h>

#include "check.h"
#include "codec/encoding.h"

#define ALL                                                                                        \
    (PS_CODING_BIT(PS_CODING_BR) | PS_CODING_BIT(PS_CODING_ZSTD) | PS_CODING_BIT(PS_CODING_GZIP))

/* The coding chosen for one field line among `offered`. */
static ps_coding_t choose(const char *field, unsigned offered)
{
    ps_accept_t a;
    ps_accept_init(&a);
    ps_accept_parse(&a, (ps_slice_t){field, strlen(field)});
    return ps_accept_choose(&a, offered);
}

static void test_no_field_means_identity(void)
{
    ps_accept_t a;
    ps_accept_init(&a);
    CHECK_EQ(ps_accept_choose(&a, ALL), PS_CODING_IDENTITY);
}

static void test_an_empty_field_means_identity(void)
{
    CHECK_EQ(choose("", ALL), PS_CODING_IDENTITY);
    CHECK_EQ(choose("  ,  ", ALL), PS_CODING_IDENTITY);
}

static void test_equal_weights_take_the_servers_order(void)
{
    CHECK_EQ(choose("gzip, deflate, br, zstd", ALL), PS_CODING_BR);
    CHECK_EQ(choose("gzip, zstd", ALL), PS_CODING_ZSTD);
    CHECK_EQ(choose("gzip", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("*", ALL), PS_CODING_BR);
}

static void test_weights_decide(void)
{
    CHECK_EQ(choose("br;q=0.5, gzip;q=0.8", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("br;q=0.5, gzip;q=0.8, zstd;q=0.9", ALL), PS_CODING_ZSTD);
    CHECK_EQ(choose("gzip ; q=0.001, br ; Q=0.002", ALL), PS_CODING_BR);
    CHECK_EQ(choose("gzip;q=1.000", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("GZIP", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("x-gzip", ALL), PS_CODING_GZIP);
}

static void test_identity_preferred_when_weighted_higher(void)
{
    CHECK_EQ(choose("gzip;q=0.5, identity", ALL), PS_CODING_IDENTITY);
    CHECK_EQ(choose("gzip;q=0.5, identity;q=0.5", ALL), PS_CODING_GZIP);
}

static void test_zero_excludes(void)
{
    CHECK_EQ(choose("gzip;q=0", ALL), PS_CODING_IDENTITY);
    CHECK_EQ(choose("*;q=0, gzip", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("*, br;q=0", ALL), PS_CODING_ZSTD);
    CHECK_EQ(choose("identity;q=0", 0), PS_CODING_NONE);
    CHECK_EQ(choose("*;q=0", ALL), PS_CODING_NONE);
    CHECK_EQ(choose("identity;q=0, gzip", ALL), PS_CODING_GZIP);
    /* A coding named twice keeps the lower weight. */
    CHECK_EQ(choose("br, br;q=0", ALL), PS_CODING_IDENTITY);
}

static void test_only_offered_codings_are_chosen(void)
{
    CHECK_EQ(choose("br, gzip;q=0.1", PS_CODING_BIT(PS_CODING_GZIP)), PS_CODING_GZIP);
    CHECK_EQ(choose("br", PS_CODING_BIT(PS_CODING_GZIP)), PS_CODING_IDENTITY);
    CHECK_EQ(choose("br, gzip", 0), PS_CODING_IDENTITY);
}

static void test_malformed_elements_are_ignored(void)
{
    CHECK_EQ(choose("br;q=1.5, gzip", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("br;q=, gzip", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("br;q=0.0001, gzip", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("br;q=2, gzip", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("br;q=0.5x, gzip;q=0.1", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("br q=0.5, gzip;q=0.1", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("br;=1, gzip;q=0.1", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("br;level=, gzip;q=0.1", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("br;level=11, gzip;q=0.1", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("br;q=0.5;q=0.5, gzip;q=0.1", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("br;q =0.5, gzip;q=0.1", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("br;q= 0.5, gzip;q=0.1", ALL), PS_CODING_GZIP);
    CHECK_EQ(choose("*;q =0", ALL), PS_CODING_IDENTITY);
    CHECK_EQ(choose("compress, deflate, unknown", ALL), PS_CODING_IDENTITY);
    CHECK_EQ(choose("\x01\x02, gzip", ALL), PS_CODING_GZIP);
}

static void test_several_field_lines_add_up(void)
{
    ps_accept_t a;
    ps_accept_init(&a);
    ps_accept_parse(&a, (ps_slice_t){"gzip", 4});
    ps_accept_parse(&a, (ps_slice_t){"br;q=0.2", 8});
    CHECK_EQ(ps_accept_choose(&a, ALL), PS_CODING_GZIP);
    ps_accept_parse(&a, (ps_slice_t){"gzip;q=0", 8});
    CHECK_EQ(ps_accept_choose(&a, ALL), PS_CODING_BR);
}

static void test_names(void)
{
    CHECK(strcmp(ps_coding_name(PS_CODING_BR), "br") == 0);
    CHECK(strcmp(ps_coding_name(PS_CODING_ZSTD), "zstd") == 0);
    CHECK(strcmp(ps_coding_name(PS_CODING_GZIP), "gzip") == 0);
    CHECK(strcmp(ps_coding_name(PS_CODING_IDENTITY), "identity") == 0);
}

static void test_choose_by_breaks_ties_in_the_callers_order(void)
{
    static const ps_coding_t zstd_first[] = {PS_CODING_ZSTD, PS_CODING_BR, PS_CODING_GZIP};
    ps_accept_t a;
    ps_accept_init(&a);
    ps_accept_parse(&a, PS_SLICE_LIT("gzip, deflate, br, zstd"));
    CHECK_EQ(ps_accept_choose(&a, ALL), PS_CODING_BR);
    CHECK_EQ(ps_accept_choose_by(&a, ALL, zstd_first, 3), PS_CODING_ZSTD);
    /* A weight still beats the order. */
    ps_accept_init(&a);
    ps_accept_parse(&a, PS_SLICE_LIT("zstd;q=0.5, br"));
    CHECK_EQ(ps_accept_choose_by(&a, ALL, zstd_first, 3), PS_CODING_BR);
    /* A coding not offered is never chosen; nor one missing from the order. */
    CHECK_EQ(ps_accept_choose_by(&a, ALL & ~PS_CODING_BIT(PS_CODING_BR), zstd_first, 3),
             PS_CODING_ZSTD);
    CHECK_EQ(ps_accept_choose_by(&a, ALL, zstd_first + 2, 1), PS_CODING_IDENTITY);
}

int main(void)
{
    test_choose_by_breaks_ties_in_the_callers_order();
    test_no_field_means_identity();
    test_an_empty_field_means_identity();
    test_equal_weights_take_the_servers_order();
    test_weights_decide();
    test_identity_preferred_when_weighted_higher();
    test_zero_excludes();
    test_only_offered_codings_are_chosen();
    test_malformed_elements_are_ignored();
    test_several_field_lines_add_up();
    test_names();
    return check_finish("test_encoding");
}
