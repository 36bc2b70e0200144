// Prometheus' escaping schemes: the names each writes, and which one a
// client's Accept header asks for.
#include <gtest/gtest.h>

#include <string>

#include "exposition/escaping.h"
#include "exposition/exposition.h"
#include "exposition/negotiate.h"

namespace gym::exporter {
namespace {

TEST(EscapeName, TheDocumentsExamplesComeOutAsItWritesThem) {
  EXPECT_EQ(escape_name("metric.name/with/slashes", Escaping::kUnderscores),
            "metric_name_with_slashes");
  EXPECT_EQ(escape_name("metric.name.with.dots", Escaping::kDots),
            "metric_dot_name_dot_with_dot_dots");
  EXPECT_EQ(escape_name("metric.name", Escaping::kValues), "U__metric_2E_name");
  EXPECT_EQ(escape_name("metric.name", Escaping::kAllowUtf8), "metric.name");
}

TEST(EscapeName, OpenTelemetryFamilyAndLabelNamesUnderEachScheme) {
  EXPECT_EQ(escape_name("gym.concurrency.queue_depth", Escaping::kUnderscores),
            "gym_concurrency_queue_depth");
  EXPECT_EQ(escape_name("gym.concurrency.queue_depth", Escaping::kDots),
            "gym_dot_concurrency_dot_queue__depth");
  EXPECT_EQ(escape_name("gym.concurrency.queue_depth", Escaping::kValues),
            "U__gym_2E_concurrency_2E_queue__depth");
  EXPECT_EQ(escape_name("nemo.gym.server.name", Escaping::kDots),
            "nemo_dot_gym_dot_server_dot_name");
  EXPECT_EQ(escape_name("nemo.gym.server.name", Escaping::kValues),
            "U__nemo_2E_gym_2E_server_2E_name");
  EXPECT_EQ(escape_name("gym.concurrency.admissions_total", Escaping::kDots),
            "gym_dot_concurrency_dot_admissions__total");
}

TEST(EscapeName, LegacyNamesStayUnderUnderscoresAndValuesButDotsDoublesTheirUnderscores) {
  for (Escaping e : {Escaping::kUnderscores, Escaping::kValues, Escaping::kAllowUtf8})
    EXPECT_EQ(escape_name("gym_exporter_scrape_duration_seconds", e),
              "gym_exporter_scrape_duration_seconds");
  EXPECT_EQ(escape_name("gym_exporter_scrape_duration_seconds", Escaping::kDots),
            "gym__exporter__scrape__duration__seconds");
  EXPECT_EQ(escape_name("le", Escaping::kDots), "le");
  EXPECT_EQ(escape_name("a:b", Escaping::kValues), "a:b") << "a colon is a legacy character";
}

TEST(EscapeName, OtherCharactersByCodePointAndALeadingDigit) {
  // Two- and three-byte UTF-8, a leading digit (not legacy first), a slash.
  EXPECT_EQ(escape_name("gr\xC3\xBC\xC3\x9F", Escaping::kValues), "U__gr_FC__DF_");
  EXPECT_EQ(escape_name("\xE2\x82\xAC"
                        "cost",
                        Escaping::kValues),
            "U___20AC_cost");
  EXPECT_EQ(escape_name("\xF0\x9F\x98\x80", Escaping::kValues), "U___1F600_");
  EXPECT_EQ(escape_name("1x", Escaping::kValues), "U___31_x");
  EXPECT_EQ(escape_name("1x", Escaping::kUnderscores), "_x");
  EXPECT_EQ(escape_name("a/b_c.d", Escaping::kDots), "a_b__c_dot_d");
  EXPECT_EQ(escape_name("gr\xC3\xBC", Escaping::kUnderscores), "gr_") << "one character, one _";
}

TEST(EscapeName, InvalidUtf8IsTheReplacementCharacterPerByte) {
  EXPECT_EQ(escape_name("a\xFF", Escaping::kValues), "U__a_FFFD_");
  EXPECT_EQ(escape_name("a\xC3", Escaping::kValues), "U__a_FFFD_") << "cut short";
  EXPECT_EQ(escape_name("a\xC0\xAE", Escaping::kValues), "U__a_FFFD__FFFD_") << "overlong";
  EXPECT_EQ(escape_name("a\xED\xA0\x80", Escaping::kValues), "U__a_FFFD__FFFD__FFFD_")
      << "a surrogate";
  EXPECT_EQ(escape_name("a\xFF"
                        "b",
                        Escaping::kUnderscores),
            "a_b");
  EXPECT_EQ(escape_name("", Escaping::kValues), "U__") << "no name is not a legacy one";
}

TEST(EscapingScheme, EachOfTheFourByNameAndAnyOtherIsUnderscores) {
  for (Escaping e :
       {Escaping::kUnderscores, Escaping::kDots, Escaping::kValues, Escaping::kAllowUtf8})
    EXPECT_EQ(escaping_scheme(escaping_name(e)), e);
  EXPECT_EQ(escaping_scheme("Dots"), Escaping::kUnderscores) << "values are case-sensitive";
  EXPECT_EQ(escaping_scheme("utf-8"), Escaping::kUnderscores);
  EXPECT_EQ(escaping_scheme(""), Escaping::kUnderscores);
}

TEST(Accept, TheSchemeOfTheBestRangeOfTheChosenFormat) {
  const char* prometheus3 =
      "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
      "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;"
      "escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";
  EXPECT_EQ(escaping(prometheus3, negotiate(prometheus3)), Escaping::kAllowUtf8);
  const char* prometheus2 =
      "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
      "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
  EXPECT_EQ(escaping(prometheus2, negotiate(prometheus2)), std::nullopt);
  for (const char* scheme : {"underscores", "dots", "values", "allow-utf-8"}) {
    const std::string om = std::string("application/openmetrics-text;version=1.0.0;escaping=") +
                           scheme + ",text/plain;q=0.5";
    EXPECT_EQ(negotiate(om.c_str()), Format::kOpenMetrics);
    EXPECT_EQ(escaping(om.c_str(), Format::kOpenMetrics), escaping_scheme(scheme)) << om;
    const std::string text = std::string("text/plain;version=1.0.0;escaping=") + scheme;
    EXPECT_EQ(negotiate(text.c_str()), Format::kText);
    EXPECT_EQ(escaping(text.c_str(), Format::kText), escaping_scheme(scheme)) << text;
  }
  EXPECT_EQ(
      escaping("application/openmetrics-text;version=1.0.0;escaping=bananas", Format::kOpenMetrics),
      Escaping::kUnderscores)
      << "an unknown scheme";
  // Text names a scheme only in version 1.0.0, and only by its best range.
  EXPECT_EQ(escaping("text/plain;version=0.0.4;escaping=dots", Format::kText), std::nullopt);
  EXPECT_EQ(escaping("text/plain;version=1.0.0", Format::kText), std::nullopt);
  EXPECT_EQ(escaping("text/plain;version=1.0.0;escaping=values;q=0.3,"
                     "text/plain;version=0.0.4;q=0.5",
                     Format::kText),
            std::nullopt)
      << "the legacy names are preferred";
  EXPECT_EQ(escaping("text/plain;version=0.0.4;q=0.5,"
                     "text/plain;version=1.0.0;escaping=dots;q=0.5",
                     Format::kText),
            Escaping::kDots)
      << "on a tie, the range that names a scheme";
  EXPECT_EQ(escaping("*/*", Format::kText), std::nullopt) << "a wildcard names none";
  EXPECT_EQ(escaping(nullptr, Format::kText), std::nullopt);
  EXPECT_EQ(escaping("application/openmetrics-text;version=1.0.0;escaping=dots;q=0",
                     Format::kOpenMetrics),
            std::nullopt);
  // Protobuf's names are UTF-8 strings: allow-utf-8 or the legacy names.
  const char* proto =
      "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
      "encoding=delimited;escaping=";
  EXPECT_EQ(escaping((std::string(proto) + "allow-utf-8").c_str(), Format::kProtobuf),
            Escaping::kAllowUtf8);
  EXPECT_EQ(escaping((std::string(proto) + "dots").c_str(), Format::kProtobuf), std::nullopt);
}

TEST(Accept, TheContentTypeEchoesTheSchemeUsed) {
  EXPECT_EQ(encoder_for(Format::kText).content_type(), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(encoder_for(Format::kText, Escaping::kDots).content_type(),
            "text/plain; version=1.0.0; charset=utf-8; escaping=dots");
  EXPECT_EQ(encoder_for(Format::kText, Escaping::kUnderscores).content_type(),
            "text/plain; version=1.0.0; charset=utf-8; escaping=underscores");
  EXPECT_EQ(encoder_for(Format::kText, Escaping::kAllowUtf8).content_type(),
            "text/plain; version=1.0.0; charset=utf-8; escaping=allow-utf-8");
  EXPECT_EQ(encoder_for(Format::kOpenMetrics).content_type(),
            "application/openmetrics-text; version=1.0.0; charset=utf-8");
  EXPECT_EQ(encoder_for(Format::kOpenMetrics, Escaping::kValues).content_type(),
            "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=values");
  EXPECT_EQ(encoder_for(Format::kOpenMetrics, Escaping::kAllowUtf8).content_type(),
            "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=allow-utf-8");
  EXPECT_EQ(encoder_for(Format::kProtobuf, Escaping::kAllowUtf8).content_type(),
            "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
            "encoding=delimited; escaping=allow-utf-8");
  for (Escaping e :
       {Escaping::kUnderscores, Escaping::kDots, Escaping::kValues, Escaping::kAllowUtf8}) {
    EXPECT_EQ(encoder_for(Format::kText, e).escaping(), e);
    EXPECT_EQ(encoder_for(Format::kOpenMetrics, e).escaping(), e);
  }
  EXPECT_EQ(encoder_for(Format::kProtobuf, Escaping::kDots).escaping(), Escaping::kUnderscores);
}

}  // namespace
TEST(Negotiation, OneParseGivesTheFormatAndTheSchemeThatTwoWouldGive) {
  const char* headers[] = {
      nullptr,
      "",
      "*/*",
      "text/plain;version=1.0.0;escaping=dots",
      "application/openmetrics-text;version=1.0.0;escaping=values;q=0.5,text/plain;q=0.4",
      "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
      "encoding=delimited;escaping=allow-utf-8;q=0.7,text/plain;q=0.3",
      "application/openmetrics-text;version=1.0.0;q=0.2,"
      "application/openmetrics-text;version=1.0.0;escaping=underscores;q=0.2"};
  for (const char* h : headers) {
    const Negotiated n = negotiate_accept(h);
    EXPECT_EQ(n.format, negotiate(h)) << (h ? h : "(none)");
    EXPECT_EQ(n.escaping, escaping(h, n.format)) << (h ? h : "(none)");
  }
  EXPECT_EQ(negotiate_accept(headers[5]).format, Format::kProtobuf);
  EXPECT_EQ(negotiate_accept(headers[5]).escaping, Escaping::kAllowUtf8);
}

}  // namespace gym::exporter
