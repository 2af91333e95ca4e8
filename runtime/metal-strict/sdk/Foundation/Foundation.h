// <Foundation/Foundation.h> of the strict bridge check (runtime/metal-strict/strict_check.ts):
// declarations of the Foundation API mpsc_metal_bridge.mm uses, with the selectors and types of
// Apple's Foundation documentation. Declarations only; nothing is linked or run.
#pragma once
#include <Availability.h>
#include <objc/NSObject.h>
#include <dispatch/dispatch.h>

typedef struct {
  unsigned long state;
  id __unsafe_unretained* itemsPtr;
  unsigned long* mutationsPtr;
  unsigned long extra[5];
} NSFastEnumerationState;

@protocol NSFastEnumeration
- (NSUInteger)countByEnumeratingWithState:(NSFastEnumerationState*)state
                                  objects:(id __unsafe_unretained[])buffer
                                    count:(NSUInteger)len;
@end

@interface NSString : NSObject
+ (instancetype)stringWithUTF8String:(const char*)nullTerminatedCString;
@property (readonly) const char* UTF8String __attribute__((objc_returns_inner_pointer));
@property (readonly) NSUInteger length;
@end

typedef NSString* NSErrorDomain;

@interface NSError : NSObject
@property (readonly, copy) NSErrorDomain domain;
@property (readonly) NSInteger code;
@property (readonly, copy) NSString* localizedDescription;
@end

@interface NSURL : NSObject
+ (NSURL*)fileURLWithPath:(NSString*)path;
@property (readonly, copy) NSString* path;
@end

@interface NSFileManager : NSObject
@property (class, readonly, strong) NSFileManager* defaultManager;
- (BOOL)fileExistsAtPath:(NSString*)path;
@end

@interface NSArray<__covariant ObjectType> : NSObject <NSFastEnumeration>
@property (readonly) NSUInteger count;
@property (nonatomic, readonly) ObjectType firstObject;
- (ObjectType)objectAtIndex:(NSUInteger)index;
- (ObjectType)objectAtIndexedSubscript:(NSUInteger)idx;
@end
